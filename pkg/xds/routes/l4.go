package routes

import (
	"fmt"
	"slices"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// WeightedCluster is a destination of a TCP or TLS route.
type WeightedCluster struct {
	Cluster string
	Weight  uint32 // 0 when it is the only one
}

// L4Route is where a TCP connection goes: one cluster, or several by
// weight. VirtualService names the object it comes from (metadata,
// stats).
type L4Route struct {
	// SNIHosts are the server names a TLS passthrough route matches;
	// empty for a TCP route.
	SNIHosts []string
	// DestinationCIDRs are the destination subnets a sidecar's route
	// matches (destinationSubnets); gateways do not read them.
	DestinationCIDRs []string
	Destinations     []WeightedCluster
	VirtualService   model.Meta
	// Named: the chain names VirtualService in its metadata, as Istio's
	// sidecar chains of a tls match or of a tcp rule matching every
	// connection do (not those of destination subnets).
	Named bool
}

// GatewayTLSRoutes is Options{}.GatewayTLSRoutes: Istio's defaults.
func GatewayTLSRoutes(snap *model.Snapshot, gw *model.Gateway, srv *networkingv1.Server, proxyNamespace string, claimed map[string]bool) ([]L4Route, []Problem) {
	return Options{}.GatewayTLSRoutes(snap, gw, srv, proxyNamespace, claimed)
}

// GatewayTCPRoutes is Options{}.GatewayTCPRoutes: Istio's defaults.
func GatewayTCPRoutes(snap *model.Snapshot, gw *model.Gateway, srv *networkingv1.Server, proxyNamespace string) (*L4Route, []Problem) {
	return Options{}.GatewayTCPRoutes(snap, gw, srv, proxyNamespace)
}

// GatewayTLSRoutes returns, for a PASSTHROUGH server srv of gateway gw,
// the routes of the VirtualServices bound to gw (as the gateway pod's
// namespace sees them) whose hosts overlap the server's: one per `tls`
// match whose port (if any) is the server port and whose gateways (if
// any) name gw, in order. claimed holds the SNI hosts already routed on
// the server's listener port ("<bind>/<sni>"); a match naming one again
// would give Envoy two identical filter chains, so it is left out with a
// Problem, as Istio skips it. claimed may be nil, and is updated.
func (o Options) GatewayTLSRoutes(snap *model.Snapshot, gw *model.Gateway, srv *networkingv1.Server, proxyNamespace string, claimed map[string]bool) ([]L4Route, []Problem) {
	if claimed == nil {
		claimed = map[string]bool{}
	}
	if len(srv.GetHosts()) > MaxHosts {
		return nil, []Problem{serverTooBig(gw, srv)}
	}
	gwName := GatewayName(gw)
	var out []L4Route
	var problems []Problem
	for _, vs := range o.boundTo(snap, gwName, proxyNamespace) {
		if reason := checkBounds(vs.Spec); reason != "" {
			problems = append(problems, vsProblem(vs, "left out of gateway %s: %s", gwName, reason))
			continue
		}
		if !overlaps(snap, gw, srv, vs) {
			continue
		}
		for i, rule := range vs.Spec.GetTls() {
			if len(rule.GetRoute()) == 0 {
				continue
			}
			for _, m := range rule.GetMatch() {
				if !l4Applies(m.GetPort(), m.GetGateways(), srv, gwName, vs.Namespace) {
					continue
				}
				var dup []string
				for _, sni := range m.GetSniHosts() {
					if claimed[srv.GetBind()+"/"+sni] {
						dup = append(dup, sni)
					}
				}
				if len(dup) > 0 || len(m.GetSniHosts()) == 0 {
					problems = append(problems, vsProblem(vs, "tls[%d] left out of gateway %s port %d: SNI hosts %v already routed or none", i, gwName, srv.GetPort().GetNumber(), dup))
					continue
				}
				dsts := l4Destinations(snap, vs, srv.GetPort().GetNumber(), rule.GetRoute(), snap.Service)
				if len(dsts) == 0 {
					problems = append(problems, vsProblem(vs, "tls[%d] left out of gateway %s: no destination of positive weight, or one without a host", i, gwName))
					continue
				}
				for _, sni := range m.GetSniHosts() {
					claimed[srv.GetBind()+"/"+sni] = true
				}
				out = append(out, L4Route{SNIHosts: slices.Clone(m.GetSniHosts()), Destinations: dsts, VirtualService: vs.Meta})
			}
		}
	}
	return out, problems
}

// GatewayTCPRoutes returns the TCP route of server srv of gateway gw (opaque
// TCP, or TCP after TLS termination): the first `tcp` rule, among the
// VirtualServices bound to gw whose hosts overlap the server's, with a
// match for the server's port and gateway (or no match), and
// destinations. Nil when there is none.
func (o Options) GatewayTCPRoutes(snap *model.Snapshot, gw *model.Gateway, srv *networkingv1.Server, proxyNamespace string) (*L4Route, []Problem) {
	if len(srv.GetHosts()) > MaxHosts {
		return nil, []Problem{serverTooBig(gw, srv)}
	}
	gwName := GatewayName(gw)
	var problems []Problem
	for _, vs := range o.boundTo(snap, gwName, proxyNamespace) {
		if reason := checkBounds(vs.Spec); reason != "" {
			problems = append(problems, vsProblem(vs, "left out of gateway %s: %s", gwName, reason))
			continue
		}
		if !overlaps(snap, gw, srv, vs) {
			continue
		}
		for i, rule := range vs.Spec.GetTcp() {
			ok := len(rule.GetMatch()) == 0
			for _, m := range rule.GetMatch() {
				if l4Applies(m.GetPort(), m.GetGateways(), srv, gwName, vs.Namespace) {
					ok = true
					break
				}
			}
			if !ok || len(rule.GetRoute()) == 0 {
				continue
			}
			dsts := l4Destinations(snap, vs, srv.GetPort().GetNumber(), rule.GetRoute(), snap.Service)
			if len(dsts) == 0 {
				// Istio's generator fails on such a rule; it is refused.
				problems = append(problems, vsProblem(vs, "tcp[%d] left out of gateway %s: no destination of positive weight, or one without a host", i, gwName))
				return nil, problems
			}
			return &L4Route{Destinations: dsts, VirtualService: vs.Meta}, problems
		}
	}
	return nil, problems
}

// overlaps reports whether a host of vs matches a host of srv that vs's
// namespace may claim (Istio's pickMatchingGatewayHosts).
func overlaps(snap *model.Snapshot, gw *model.Gateway, srv *networkingv1.Server, vs *model.VirtualService) bool {
	server := serverHostsFor(srv.GetHosts(), gw.Namespace, vs.Namespace)
	for _, h := range vs.Spec.GetHosts() {
		h = fqdn(snap, h, vs.Namespace)
		for _, s := range server {
			if matches(s, h) {
				return true
			}
		}
	}
	return false
}

func l4Applies(port uint32, gateways []string, srv *networkingv1.Server, gwName, vsNs string) bool {
	if port != 0 && port != srv.GetPort().GetNumber() {
		return false
	}
	if len(gateways) == 0 {
		return true
	}
	return slices.ContainsFunc(gateways, func(g string) bool { return resolveGateway(g, vsNs) == gwName })
}

// l4Destinations: one destination is the cluster (whatever its weight);
// several are weighted, those of weight 0 left out. A destination's port
// is its own, else that of the service (as lookup finds it) when it has
// one port, else the listener's (Istio's GetDestinationCluster).
func l4Destinations(snap *model.Snapshot, vs *model.VirtualService, port uint32, dsts []*networkingv1.RouteDestination, lookup func(host string) *model.Service) []WeightedCluster {
	for _, d := range dsts {
		if d.GetDestination().GetHost() == "" {
			return nil // refused by the caller: a destination without a host
		}
	}
	cluster := func(d *networkingv1.Destination) string {
		host := fqdn(snap, d.GetHost(), vs.Namespace)
		p := port
		if d.GetPort() != nil {
			p = d.GetPort().GetNumber()
		} else if svc := lookup(host); svc != nil && len(svc.Ports) == 1 {
			p = svc.Ports[0].Port
		}
		return resource.ClusterName(host, d.GetSubset(), p)
	}
	if len(dsts) == 1 {
		return []WeightedCluster{{Cluster: cluster(dsts[0].GetDestination())}}
	}
	var out []WeightedCluster
	for _, d := range dsts {
		if d.GetWeight() <= 0 {
			continue
		}
		out = append(out, WeightedCluster{Cluster: cluster(d.GetDestination()), Weight: uint32(d.GetWeight())})
	}
	return out
}

func serverTooBig(gw *model.Gateway, srv *networkingv1.Server) Problem {
	return Problem{Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name,
		Reason: fmt.Sprintf("server %q of %d hosts, more than %d, gets no routes", srv.GetName(), len(srv.GetHosts()), MaxHosts)}
}
