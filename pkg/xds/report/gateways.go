package report

import (
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// gatewayProblems are the Gateway servers not served to the routers
// connected, and the parts of VirtualServices their routes leave out,
// once per distinct router scope, in snap.
func (s *scan) gatewayProblems(snap *model.Snapshot) ([]envoygen.GatewayProblem, []routes.Problem) {
	routers := s.connected.Routers
	if len(routers) == 0 {
		return nil, nil
	}
	ms := s.mesh
	snap = ms.Derive(snap)
	seen := map[string]bool{}
	var out []envoygen.GatewayProblem
	var vs []routes.Problem
	for _, w := range routers {
		labels, ips := w.In(snap)
		p := &envoygen.Proxy{Namespace: w.Namespace, Labels: labels, IPs: ips, Router: true, Unprivileged: w.Unprivileged}
		scope := ms.Envoy.Scope(snap, p)
		if seen[scope] {
			continue
		}
		seen[scope] = true
		out = append(out, ms.Envoy.GatewayProblems(snap, p)...)
		vs = append(vs, ms.Envoy.RouteProblems(snap, p)...)
	}
	return out, vs
}

// reportGateways logs each Gateway problem once while it lasts and
// counts them by kind.
func (s *scan) reportGateways(snap *model.Snapshot, closed failClosed, current map[string]bool) {
	servers, vss := s.gatewayProblems(snap)
	for _, p := range servers {
		closed.add("Gateway", "server_"+p.Kind())
		msg := p.String()
		if current[msg] {
			continue // another router scope with the same problem
		}
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("gateway server not served", "gateway", p.Namespace+"/"+p.Name, "port", p.Port, "problem", p.Reason)
		}
	}
	for _, p := range vss {
		closed.add(p.Kind, "route_left_out")
		msg := p.String()
		if current[msg] {
			continue
		}
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("virtual service not routed as written", "kind", p.Kind, "name", p.Namespace+"/"+p.Name, "problem", p.Reason)
		}
	}
	s.reportNetworks(snap, closed, current)
}
