package routes

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// The tls and tcp rules of the VirtualServices bound to "mesh", as a
// sidecar's outbound listener of one service port applies them (Istio's
// buildSidecarOutboundTLSFilterChainOpts and
// buildSidecarOutboundTCPFilterChainOpts):
//   - every VirtualService the proxy sees with a host matching the
//     service's, in order; of each, the rules with destinations, and of
//     those the matches met by the proxy (port, gateways naming "mesh",
//     sourceLabels, sourceNamespace);
//   - on a TLS or HTTPS port, a chain per such tls match, chosen by its
//     sniHosts and destinationSubnets; a later match with the same ones
//     is never reached and left out;
//   - on a TCP or undeclared port, the first rule (or match) without
//     destinationSubnets takes every connection, and stops the search;
//     one with subnets alone gets a chain chosen by them.

// SidecarL4 is what VirtualServices make of one outbound listener's
// service port.
type SidecarL4 struct {
	// Chains are matched by SNI or destination subnets, in order.
	Chains []L4Route
	// Default takes the connections Chains do not: a route that matches
	// every connection; nil for none.
	Default *L4Route
	// Routed: some tls match applies on a TLS port. The service then gets
	// no chain of its own: what no chain takes goes where unknown
	// destinations go.
	Routed bool
	// Problems are matches left out because Envoy would refuse their
	// chain beside an earlier one (a server name or subnet already
	// chosen): Istio sends both and Envoy rejects the listener.
	Problems []Problem
}

// Empty reports whether s changes nothing of the service's own chain.
func (s *SidecarL4) Empty() bool {
	return s == nil || (len(s.Chains) == 0 && s.Default == nil && !s.Routed)
}

// L4VirtualServices are those of vss (MeshVirtualServices) with tls or tcp
// rules, with their hosts: what SidecarL4Routes reads. Nil when none has.
func L4VirtualServices(snap *model.Snapshot, vss []*model.VirtualService) []L4VirtualService {
	var out []L4VirtualService
	for _, vs := range vss {
		if len(vs.Spec.GetTls()) > 0 || len(vs.Spec.GetTcp()) > 0 {
			out = append(out, L4VirtualService{VS: vs, Hosts: Hosts(snap, vs)})
		}
	}
	return out
}

// L4VirtualService is a VirtualService with tls or tcp rules and its
// hosts as a sidecar matches them.
type L4VirtualService struct {
	VS    *model.VirtualService
	Hosts []string
}

// HasL4 reports whether a VirtualService of snap bound to "mesh" has tls
// or tcp rules: only then do sidecars' listeners read VirtualServices.
func HasL4(snap *model.Snapshot) bool {
	for _, vs := range snap.Resources().VirtualServices {
		if vs.Spec != nil && len(vs.Spec.GetHosts()) > 0 && (len(vs.Spec.GetTls()) > 0 || len(vs.Spec.GetTcp()) > 0) &&
			slices.Contains(gatewaysOf(vs), Mesh) && meshRefusal(vs) == "" {
			return true
		}
	}
	return false
}

// SidecarL4Routes returns what the VirtualServices vss (L4VirtualServices
// of what proxy sees) make of port of the service of hostname on a
// sidecar's outbound listener; tls is whether the port's protocol is TLS
// or HTTPS. Destinations are resolved as the proxy sees services: the
// port of the destination, else that of a service with one port, else
// the listener's.
func SidecarL4Routes(snap *model.Snapshot, vss []L4VirtualService, hostname string, port uint32, tls bool, proxy Proxy) *SidecarL4 {
	out := &SidecarL4{}
	for _, v := range vss {
		if !slices.ContainsFunc(v.Hosts, func(h string) bool { return matches(h, hostname) }) {
			continue
		}
		if tls {
			if out.tlsRules(snap, v.VS, port, proxy) {
				out.Routed = true
			}
			continue
		}
		if out.tcpRules(snap, v.VS, port, proxy) {
			break
		}
	}
	return out
}

// tlsRules adds vs's tls matches that apply, and reports whether one did.
func (s *SidecarL4) tlsRules(snap *model.Snapshot, vs *model.VirtualService, port uint32, proxy Proxy) bool {
	applied := false
	for i, rule := range vs.Spec.GetTls() {
		if len(rule.GetRoute()) == 0 {
			continue
		}
		for _, m := range rule.GetMatch() {
			if !l4MeshApplies(m.GetPort(), m.GetGateways(), m.GetSourceLabels(), m.GetSourceNamespace(), port, vs.Namespace, proxy) {
				continue
			}
			r := L4Route{SNIHosts: m.GetSniHosts(), DestinationCIDRs: m.GetDestinationSubnets(), VirtualService: vs.Meta, Named: true}
			if s.reached(r) {
				applied = true
				continue // an earlier match has the same SNI names and subnets
			}
			if clash := s.clash(r); clash != "" {
				s.Problems = append(s.Problems, vsProblem(vs, "tls[%d] left out of sidecars: %s is already chosen by an earlier match, and Envoy refuses two chains for it", i, clash))
				continue
			}
			r.Destinations = meshDestinations(snap, vs, port, rule.GetRoute(), proxy)
			if len(r.Destinations) == 0 {
				s.Problems = append(s.Problems, vsProblem(vs, "tls[%d] left out of sidecars: no destination of positive weight, or one without a host", i))
				continue
			}
			s.add(r)
			applied = true
		}
	}
	return applied
}

// tcpRules adds vs's tcp rules that apply, and reports whether one took
// every connection (the search stops there).
func (s *SidecarL4) tcpRules(snap *model.Snapshot, vs *model.VirtualService, port uint32, proxy Proxy) bool {
	for i, rule := range vs.Spec.GetTcp() {
		if len(rule.GetRoute()) == 0 {
			continue
		}
		all := len(rule.GetMatch()) == 0
		var subnets []string
		for _, m := range rule.GetMatch() {
			if !l4MeshApplies(m.GetPort(), m.GetGateways(), m.GetSourceLabels(), m.GetSourceNamespace(), port, vs.Namespace, proxy) {
				continue
			}
			if len(m.GetDestinationSubnets()) == 0 {
				all = true
				break
			}
			subnets = append(subnets, m.GetDestinationSubnets()...)
		}
		if !all && len(subnets) == 0 {
			continue
		}
		r := L4Route{VirtualService: vs.Meta, Destinations: meshDestinations(snap, vs, port, rule.GetRoute(), proxy)}
		if len(r.Destinations) == 0 {
			s.Problems = append(s.Problems, vsProblem(vs, "tcp[%d] left out of sidecars: no destination of positive weight, or one without a host", i))
			continue
		}
		if all {
			r.Named = true
			s.add(r)
			return true
		}
		r.DestinationCIDRs = subnets
		if clash := s.clash(r); clash != "" {
			s.Problems = append(s.Problems, vsProblem(vs, "tcp[%d] left out of sidecars: %s is already chosen by an earlier match, and Envoy refuses two chains for it", i, clash))
			continue
		}
		s.add(r)
	}
	return false
}

// add appends r: to Default when it matches every connection (the last
// such one wins, as Istio's listener takes it), else to Chains.
func (s *SidecarL4) add(r L4Route) {
	if r.MatchesAll() {
		s.Default = &r
		return
	}
	s.Chains = append(s.Chains, r)
}

// reached reports whether an earlier chain has r's SNI names and subnets
// as written (Istio's runtime predicates), so r is never reached.
func (s *SidecarL4) reached(r L4Route) bool {
	key := func(x L4Route) string {
		return strings.Join(x.SNIHosts, ",") + "|" + strings.Join(x.DestinationCIDRs, ",")
	}
	if r.MatchesAll() && s.Default != nil && key(*s.Default) == key(r) {
		return true
	}
	return slices.ContainsFunc(s.Chains, func(c L4Route) bool { return key(c) == key(r) })
}

// clash names a server name (or subnet) of r that an earlier chain also
// chooses, so that Envoy would find two chains for one connection; "" if
// none. Routes matching every connection never clash: the last one is the
// listener's default.
func (s *SidecarL4) clash(r L4Route) string {
	if r.MatchesAll() {
		return ""
	}
	for _, c := range s.Chains {
		if k := ChainsOverlap(c, r); k != "" {
			return k
		}
	}
	return ""
}

// MatchesAll reports whether r's chain matches every connection: no SNI
// name (or "*") and no subnet.
func (r L4Route) MatchesAll() bool {
	return (len(r.SNIHosts) == 0 || slices.Contains(r.SNIHosts, "*")) && len(r.DestinationCIDRs) == 0
}

// ServerNames are r's SNI names as its chain matches them: sorted, none
// when "*" is among them.
func (r L4Route) ServerNames() []string {
	if slices.Contains(r.SNIHosts, "*") {
		return nil
	}
	return slices.Sorted(slices.Values(r.SNIHosts))
}

// Prefixes are r's destination subnets as its chain matches them: sorted
// as written, a bare address as its own /32 (or /128), unspecified
// addresses and what is not an address left out.
func (r L4Route) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, c := range slices.Sorted(slices.Values(r.DestinationCIDRs)) {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			a, aerr := netip.ParseAddr(c)
			if aerr != nil {
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().IsUnspecified() {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ChainsOverlap names a server name or subnet for which the chains of a
// and b would both match a connection with equal specificity (Envoy
// refuses such a listener); "" when none. Two chains overlap when they
// share a server name (or both have none) and a subnet (or both have
// none).
func ChainsOverlap(a, b L4Route) string {
	an, bn := a.ServerNames(), b.ServerNames()
	name := ""
	switch {
	case len(an) == 0 && len(bn) == 0:
		name = "no server name"
	default:
		// Envoy matches server names without regard to case.
		for _, n := range an {
			if slices.ContainsFunc(bn, func(m string) bool { return strings.EqualFold(m, n) }) {
				name = "server name " + n
				break
			}
		}
	}
	if name == "" {
		return ""
	}
	ap, bp := a.Prefixes(), b.Prefixes()
	if len(ap) == 0 && len(bp) == 0 {
		return name
	}
	for _, p := range ap {
		for _, q := range bp {
			if p.Masked() == q.Masked() {
				return fmt.Sprintf("%s, subnet %s", name, p.Masked())
			}
		}
	}
	return ""
}

// l4MeshApplies reports whether an L4 match with these fields is met on
// a sidecar of proxy, for the listener port: Istio's matchTLS and
// matchTCP.
func l4MeshApplies(matchPort uint32, gateways []string, sourceLabels map[string]string, sourceNamespace string, port uint32, vsNs string, proxy Proxy) bool {
	if matchPort != 0 && matchPort != port {
		return false
	}
	if len(gateways) > 0 && !slices.Contains(gateways, Mesh) {
		return false
	}
	if proxy.AnySource {
		return true
	}
	if !model.Matches(sourceLabels, proxy.Labels) {
		return false
	}
	return sourceNamespace == "" || sourceNamespace == proxy.Namespace
}

// meshDestinations are the clusters of dsts on a sidecar's listener port:
// l4Destinations with services looked up as proxy sees them.
func meshDestinations(snap *model.Snapshot, vs *model.VirtualService, port uint32, dsts []*networkingv1.RouteDestination, proxy Proxy) []WeightedCluster {
	return l4Destinations(snap, vs, port, dsts, func(host string) *model.Service { return snap.VisibleService(host, proxy.Namespace) })
}

// AllL4VirtualServices are the VirtualServices of snap bound to "mesh"
// with tls or tcp rules, whatever they are exported to, oldest first (then
// by name and namespace): what some sidecar may apply, to find the
// problems of.
func AllL4VirtualServices(snap *model.Snapshot) []L4VirtualService {
	var vss []*model.VirtualService
	for _, vs := range snap.Resources().VirtualServices {
		if vs.Spec != nil && len(vs.Spec.GetHosts()) > 0 && (len(vs.Spec.GetTls()) > 0 || len(vs.Spec.GetTcp()) > 0) &&
			slices.Contains(gatewaysOf(vs), Mesh) && meshRefusal(vs) == "" {
			vss = append(vss, vs)
		}
	}
	slices.SortStableFunc(vss, func(a, b *model.VirtualService) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Namespace, b.Namespace))
	})
	return L4VirtualServices(snap, vss)
}

// RoutesTo reports whether a tls or tcp rule of vs has a destination
// whose host is hostname.
func RoutesTo(snap *model.Snapshot, vs *model.VirtualService, hostname string) bool {
	var dsts [][]*networkingv1.RouteDestination
	for _, r := range vs.Spec.GetTls() {
		dsts = append(dsts, r.GetRoute())
	}
	for _, r := range vs.Spec.GetTcp() {
		dsts = append(dsts, r.GetRoute())
	}
	for _, ds := range dsts {
		for _, d := range ds {
			if fqdn(snap, d.GetDestination().GetHost(), vs.Namespace) == hostname {
				return true
			}
		}
	}
	return false
}
