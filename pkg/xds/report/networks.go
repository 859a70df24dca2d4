package report

import (
	"slices"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// reportNetworks logs, once while it lasts, each network gateway left
// out (a DNS name not resolved, a gateway Service without an ingress
// address or without its port, a NodePort gateway, meshNetworks'
// fromCidr) and each network
// whose endpoints other networks' proxies do not get because it has no
// gateway; both are counted in
// bulwark_policy_fail_closed{kind="Network"}.
func (s *scan) reportNetworks(snap *model.Snapshot, closed failClosed, current map[string]bool) {
	gws := snap.NetworkGateways(s.mesh.Envoy.Mesh.Networks)
	for _, p := range gws.Problems {
		closed.add("Network", "gateway_left_out")
		current[p] = true
		if !s.reported[p] {
			s.log.Warn("network gateway not used", "problem", p)
		}
	}
	for _, p := range envoygen.SNIDNATLeftOut(snap) {
		closed.add("ServiceEntry", "sni_dnat_left_out")
		current[p] = true
		if !s.reported[p] {
			s.log.Warn("east-west gateway cluster not generated", "problem", p)
		}
	}
	if !gws.Enabled() {
		return // clusters' own report says which networks there are
	}
	with := gws.Networks()
	var without []string
	for _, svc := range snap.Services() {
		for _, eps := range svc.Endpoints {
			for _, ep := range eps {
				if ep.Network != "" && !slices.Contains(with, ep.Network) && !slices.Contains(without, ep.Network) {
					without = append(without, ep.Network)
				}
			}
		}
	}
	slices.Sort(without)
	for _, n := range without {
		closed.add("Network", "no_gateway")
		msg := "network " + n + " has endpoints but no gateway: proxies of other networks do not get them (Istio would send them as if reachable)"
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("network without gateway", "network", n, "problem", msg)
		}
	}
}
