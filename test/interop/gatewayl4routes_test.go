package interop

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networkingv1 "istio.io/api/networking/v1"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/core"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"

	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// TestGatewayL4RoutesMatchIstio compares the TLS passthrough and TCP
// routes of routes.GatewayTLSRoutes and GatewayTCPRoutes with the filter
// chains of the listeners Istio's generator gives the gateway pod for the
// same objects: for each chain, its server names and its tcp_proxy's
// cluster or weighted clusters, in order.
func TestGatewayL4RoutesMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	pass := &networkingv1.Server{Port: &networkingv1.Port{Number: 443, Name: "tls", Protocol: "TLS"}, Hosts: []string{"*.example.com"},
		Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_PASSTHROUGH}}
	tcp := &networkingv1.Server{Port: &networkingv1.Port{Number: 31400, Name: "tcp", Protocol: "TCP"}, Hosts: []string{"*"}}
	tlsRule := func(port uint32, gateways []string, sni []string, dsts ...*networkingv1.RouteDestination) *networkingv1.TLSRoute {
		return &networkingv1.TLSRoute{Match: []*networkingv1.TLSMatchAttributes{{SniHosts: sni, Port: port, Gateways: gateways}}, Route: dsts}
	}
	d := func(host string, port, weight int32, subset string) *networkingv1.RouteDestination {
		out := &networkingv1.RouteDestination{Destination: &networkingv1.Destination{Host: host, Subset: subset}, Weight: weight}
		if port > 0 {
			out.Destination.Port = &networkingv1.PortSelector{Number: uint32(port)}
		}
		return out
	}
	cases := []struct {
		name   string
		server *networkingv1.Server
		vss    []gwVS
	}{
		{"passthrough SNI routes, port and gateway matches", pass, []gwVS{
			{name: "a", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"a.example.com", "b.example.com", "c.example.com"}, Gateways: []string{gwRef},
				Tls: []*networkingv1.TLSRoute{
					tlsRule(0, nil, []string{"a.example.com"}, d("reviews", 0, 0, "")),
					tlsRule(443, []string{gwRef}, []string{"b.example.com", "bb.example.com"}, d("ratings", 9090, 0, "v1")),
					tlsRule(8443, nil, []string{"c.example.com"}, d("reviews", 0, 0, "")),
					tlsRule(0, []string{"other/gateway"}, []string{"c.example.com"}, d("reviews", 0, 0, "")),
				}}},
			{name: "weighted", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"w.example.com"}, Gateways: []string{gwRef},
				Tls: []*networkingv1.TLSRoute{tlsRule(0, nil, []string{"w.example.com"}, d("reviews", 0, 20, ""), d("ratings", 0, 80, ""), d("mirror", 0, 0, ""))}}},
			{name: "dup", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"a.example.com"}, Gateways: []string{gwRef},
				Tls: []*networkingv1.TLSRoute{tlsRule(0, nil, []string{"a.example.com"}, d("ratings", 0, 0, "")), tlsRule(0, nil, []string{"d.example.com"}, d("ratings", 0, 0, ""))}}},
			{name: "outside", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"other.org"}, Gateways: []string{gwRef},
				Tls: []*networkingv1.TLSRoute{tlsRule(0, nil, []string{"other.org"}, d("ratings", 0, 0, ""))}}},
		}},
		{"TCP: the first block matching port and gateway wins", tcp, []gwVS{
			{name: "t", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"*"}, Gateways: []string{gwRef}, Tcp: []*networkingv1.TCPRoute{
				{Match: []*networkingv1.L4MatchAttributes{{Port: 9999}}, Route: []*networkingv1.RouteDestination{d("mirror", 0, 0, "")}},
				{Match: []*networkingv1.L4MatchAttributes{{Gateways: []string{"other/gw"}}}, Route: []*networkingv1.RouteDestination{d("mirror", 0, 0, "")}},
				{Match: []*networkingv1.L4MatchAttributes{{Port: 31400, Gateways: []string{gwRef}}}, Route: []*networkingv1.RouteDestination{d("ratings", 0, 40, ""), d("reviews", 0, 60, "v2")}},
				{Route: []*networkingv1.RouteDestination{d("details.other.svc.cluster.local", 0, 0, "")}},
			}}},
		}},
		{"TCP: a rule without match, one destination", tcp, []gwVS{
			{name: "t", ns: "default", spec: &networkingv1.VirtualService{Hosts: []string{"tcp.example.com"}, Gateways: []string{gwRef}, Tcp: []*networkingv1.TCPRoute{
				{Route: []*networkingv1.RouteDestination{d("ratings", 80, 0, "s")}},
			}}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			servers := []*networkingv1.Server{c.server}
			want := istioL4Chains(t, gwRouteCase{vss: c.vss}, servers, fmt.Sprintf("0.0.0.0_%d", c.server.GetPort().GetNumber()))
			snap, gw := ourGatewayWorld(gwRouteCase{vss: c.vss}, servers)
			var got []string
			if c.server.GetTls() != nil && c.server.GetTls().GetMode() == networkingv1.ServerTLSSettings_PASSTHROUGH {
				rs, problems := routes.Options{}.GatewayTLSRoutes(snap, gw, c.server, gwNs, nil)
				for _, r := range rs {
					got = append(got, l4String(r.SNIHosts, r.Destinations))
				}
				// The later rule naming a.example.com again is left out,
				// as Istio skips it, and reported.
				if len(problems) != 1 || problems[0].Name != "dup" {
					t.Errorf("problems %v, want the duplicate SNI of dup", problems)
				}
			} else if r, _ := (routes.Options{}).GatewayTCPRoutes(snap, gw, c.server, gwNs); r != nil {
				got = append(got, l4String(nil, r.Destinations))
			}
			if len(want) == 0 {
				t.Fatal("Istio built no chain: the case tests nothing")
			}
			if !slices.Equal(want, got) {
				t.Errorf("chains differ\nistio: %q\nours:  %q", want, got)
			}
		})
	}
}

func l4String(sni []string, dsts []routes.WeightedCluster) string {
	var parts []string
	for _, d := range dsts {
		parts = append(parts, fmt.Sprintf("%s=%d", d.Cluster, d.Weight))
	}
	return strings.Join(sni, ",") + " -> " + strings.Join(parts, " ")
}

// istioL4Chains are the filter chains of Istio's listener name for the
// gateway pod, as l4String writes them.
func istioL4Chains(t *testing.T, c gwRouteCase, servers []*networkingv1.Server, name string) []string {
	t.Helper()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	configs := []config.Config{{
		Meta: config.Meta{GroupVersionKind: gvk.Gateway, Name: "gateway", Namespace: gwNs, CreationTimestamp: base},
		Spec: &networkingv1.Gateway{Selector: gwLabels, Servers: servers},
	}}
	configs = append(configs, istioServiceEntries(base)...)
	for i, vs := range c.vss {
		configs = append(configs, config.Config{
			Meta: config.Meta{GroupVersionKind: gvk.VirtualService, Name: vs.name, Namespace: vs.ns, Domain: "cluster.local", CreationTimestamp: base.Add(time.Duration(i) * time.Minute)},
			Spec: vs.spec,
		})
	}
	cg := core.NewConfigGenTest(t, core.TestOptions{Configs: configs})
	proxy := cg.SetupProxy(&model.Proxy{
		Type: model.Router, ConfigNamespace: gwNs, Labels: gwLabels, ID: "gw.istio-system",
		Metadata: &model.NodeMetadata{Namespace: gwNs, Labels: gwLabels},
	})
	var out []string
	for _, l := range cg.Listeners(proxy) {
		if l.GetName() != name {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			out = append(out, chainString(t, fc))
		}
	}
	return out
}

func chainString(t *testing.T, fc *listenerv3.FilterChain) string {
	for _, f := range fc.GetFilters() {
		if f.GetTypedConfig().GetTypeUrl() != tcpProxyType {
			continue
		}
		p := &tcpv3.TcpProxy{}
		if err := f.GetTypedConfig().UnmarshalTo(p); err != nil {
			t.Fatal(err)
		}
		var dsts []routes.WeightedCluster
		if p.GetCluster() != "" {
			dsts = append(dsts, routes.WeightedCluster{Cluster: p.GetCluster()})
		}
		for _, w := range p.GetWeightedClusters().GetClusters() {
			dsts = append(dsts, routes.WeightedCluster{Cluster: w.GetName(), Weight: w.GetWeight()})
		}
		return l4String(fc.GetFilterChainMatch().GetServerNames(), dsts)
	}
	return "no tcp_proxy in chain " + fc.GetName()
}
