package routes

import (
	"testing"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestChainsOverlap: two chains overlap when Envoy would find both for
// one connection: a server name in common (any case), or neither having
// one, and a subnet in common, or neither having one.
func TestChainsOverlap(t *testing.T) {
	for name, tc := range map[string]struct {
		a, b    L4Route
		overlap bool
	}{
		"one server name in common":                  {L4Route{SNIHosts: []string{"a", "b"}}, L4Route{SNIHosts: []string{"c", "b"}}, true},
		"server names differing in case":             {L4Route{SNIHosts: []string{"A.example.com"}}, L4Route{SNIHosts: []string{"a.example.com"}}, true},
		"a wildcard name is its own":                 {L4Route{SNIHosts: []string{"*.example.com"}}, L4Route{SNIHosts: []string{"a.example.com"}}, false},
		"names against none":                         {L4Route{SNIHosts: []string{"a"}}, L4Route{DestinationCIDRs: []string{"10.0.0.0/8"}}, false},
		"one subnet in common, an address as /32":    {L4Route{DestinationCIDRs: []string{"10.1.0.0/16", "192.0.2.1"}}, L4Route{DestinationCIDRs: []string{"192.0.2.1/32"}}, true},
		"the same subnet written with its host bits": {L4Route{DestinationCIDRs: []string{"10.1.2.3/16"}}, L4Route{DestinationCIDRs: []string{"10.1.0.0/16"}}, true},
		"nested subnets are distinct":                {L4Route{DestinationCIDRs: []string{"10.0.0.0/8"}}, L4Route{DestinationCIDRs: []string{"10.1.0.0/16"}}, false},
		"a name in common, subnets apart":            {L4Route{SNIHosts: []string{"a"}, DestinationCIDRs: []string{"10.0.0.0/8"}}, L4Route{SNIHosts: []string{"a"}, DestinationCIDRs: []string{"11.0.0.0/8"}}, false},
		"a name in common, no subnet either":         {L4Route{SNIHosts: []string{"a"}}, L4Route{SNIHosts: []string{"a"}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := ChainsOverlap(tc.a, tc.b) != ""; got != tc.overlap {
				t.Errorf("overlap %v, want %v (%q)", got, tc.overlap, ChainsOverlap(tc.a, tc.b))
			}
		})
	}
}

// TestSidecarL4Routes: of the VirtualServices for a host, in order, a tcp
// rule matching every connection ends the search (a later VirtualService
// adds nothing); a tls match with the names and subnets of an earlier one
// is never reached; source labels decide per client, unless every source
// is asked for.
func TestSidecarL4Routes(t *testing.T) {
	dst := func(host string, w int32) *networkingv1.RouteDestination {
		return &networkingv1.RouteDestination{Destination: &networkingv1.Destination{Host: host, Port: &networkingv1.PortSelector{Number: 9000}}, Weight: w}
	}
	snap := model.Build("1", model.Options{}, model.Resources{Services: []*model.Service{
		{Meta: model.Meta{Name: "db", Namespace: "default"}, Hostname: "db.default.svc.cluster.local", Ports: []model.Port{{Name: "tcp", Port: 9000}}},
	}})
	first := vsOf("first", "default", &networkingv1.VirtualService{Hosts: []string{"db"}, Tcp: []*networkingv1.TCPRoute{
		{Match: []*networkingv1.L4MatchAttributes{{SourceLabels: map[string]string{"app": "a"}}}, Route: []*networkingv1.RouteDestination{dst("a", 0)}},
		{Match: []*networkingv1.L4MatchAttributes{{DestinationSubnets: []string{"10.0.0.0/8"}}}, Route: []*networkingv1.RouteDestination{dst("b", 0)}},
		{Route: []*networkingv1.RouteDestination{dst("c", 30), dst("d", 70)}},
	}})
	second := vsOf("second", "default", &networkingv1.VirtualService{Hosts: []string{"db"}, Tcp: []*networkingv1.TCPRoute{
		{Match: []*networkingv1.L4MatchAttributes{{DestinationSubnets: []string{"11.0.0.0/8"}}}, Route: []*networkingv1.RouteDestination{dst("e", 0)}},
	}})
	vss := L4VirtualServices(snap, []*model.VirtualService{first, second})
	host := "db.default.svc.cluster.local"

	got := SidecarL4Routes(snap, vss, host, 9000, false, Proxy{Namespace: "default", Labels: map[string]string{"app": "a"}})
	if len(got.Chains) != 0 || got.Default == nil || got.Default.Destinations[0].Cluster != "outbound|9000||a.default.svc.cluster.local" {
		t.Errorf("client app=a: %+v, want a's rule for every connection", got)
	}
	got = SidecarL4Routes(snap, vss, host, 9000, false, Proxy{Namespace: "default"})
	if len(got.Chains) != 1 || got.Chains[0].DestinationCIDRs[0] != "10.0.0.0/8" || got.Default == nil || len(got.Default.Destinations) != 2 ||
		got.Default.Destinations[1].Weight != 70 {
		t.Errorf("another client: %+v, want the subnet chain, then the weighted rule; nothing of second", got)
	}
	if got := SidecarL4Routes(snap, vss, host, 9000, false, Proxy{AnySource: true}); got.Default == nil || got.Default.Destinations[0].Cluster != "outbound|9000||a.default.svc.cluster.local" {
		t.Errorf("any source: %+v, want the first rule", got)
	}

	tls := vsOf("tls", "default", &networkingv1.VirtualService{Hosts: []string{"db"}, Tls: []*networkingv1.TLSRoute{
		{Match: []*networkingv1.TLSMatchAttributes{{SniHosts: []string{"db"}}}, Route: []*networkingv1.RouteDestination{dst("a", 0)}},
		{Match: []*networkingv1.TLSMatchAttributes{{SniHosts: []string{"db"}}}, Route: []*networkingv1.RouteDestination{dst("b", 0)}},
		{Match: []*networkingv1.TLSMatchAttributes{{SniHosts: []string{"x", "DB"}}}, Route: []*networkingv1.RouteDestination{dst("c", 0)}},
	}})
	got = SidecarL4Routes(snap, L4VirtualServices(snap, []*model.VirtualService{tls}), host, 9000, true, Proxy{Namespace: "default"})
	if !got.Routed || len(got.Chains) != 1 || got.Chains[0].Destinations[0].Cluster != "outbound|9000||a.default.svc.cluster.local" {
		t.Errorf("tls: %+v, want the first match alone", got)
	}
	if len(got.Problems) != 1 || got.Problems[0].Name != "tls" {
		t.Errorf("problems %v, want the third match's name DB, already chosen", got.Problems)
	}
	// tcp rules do not apply on a TLS port, nor tls rules on a TCP one.
	if got := SidecarL4Routes(snap, vss, host, 9000, true, Proxy{Namespace: "default"}); !got.Empty() {
		t.Errorf("tcp rules on a TLS port: %+v", got)
	}
}
