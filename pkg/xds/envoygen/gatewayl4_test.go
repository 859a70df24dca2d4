package envoygen

import (
	"slices"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/encoding/prototext"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// withVirtualServices is snap with vss as its VirtualServices.
func withVirtualServices(snap *model.Snapshot, vss ...*model.VirtualService) *model.Snapshot {
	res := *snap.Resources()
	res.VirtualServices = vss
	return model.BuildShared(snap.Version+"+vs", snap.Options, res, nil)
}

func tlsRoute(name string, sni []string, host string) *model.VirtualService {
	return &model.VirtualService{Meta: model.Meta{Namespace: "istio-system", Name: name}, Spec: &networkingv1.VirtualService{
		Hosts: []string{"*.example.com"}, Gateways: []string{"gw"},
		Tls: []*networkingv1.TLSRoute{{
			Match: []*networkingv1.TLSMatchAttributes{{SniHosts: sni}},
			Route: []*networkingv1.RouteDestination{{Destination: &networkingv1.Destination{Host: host, Port: &networkingv1.PortSelector{Number: 80}}}},
		}},
	}}
}

func chainNames(l *listener.Listener) []string {
	var out []string
	for _, fc := range l.GetFilterChains() {
		out = append(out, strings.Join(fc.GetFilterChainMatch().GetServerNames(), ","))
	}
	return out
}

// TestPassthroughRoutesBesideTerminatedServers: a PASSTHROUGH route
// does not take an SNI name a terminating server of the port has (Envoy
// would refuse two chains with one match), nor one another route took;
// those left out are reported, the others each get a chain with the
// router's network RBAC before tcp_proxy.
func TestPassthroughRoutesBesideTerminatedServers(t *testing.T) {
	passthrough := &networkingv1.Server{Port: &networkingv1.Port{Number: 443, Name: "tls", Protocol: "TLS"}, Hosts: []string{"*.example.com"},
		Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_PASSTHROUGH}}
	snap := withGateways(modeltest.Load(t, ingressManifests+`---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-range, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
`), gateway("istio-system", "gw", ingressSelector,
		httpsServer(443, "https", simple("shop"), "shop.example.com"), passthrough))
	snap = withVirtualServices(snap,
		tlsRoute("a-shop", []string{"shop.example.com"}, "echo.app.svc.cluster.local"),
		tlsRoute("b-db", []string{"db.example.com"}, "echo.app.svc.cluster.local"),
		tlsRoute("c-db-again", []string{"db.example.com"}, "other.web.svc.cluster.local"))
	g := &Generator{TrustDomain: td}
	c := generate(t, g, snap, ingress())
	l := c.listeners["0.0.0.0_8443"]
	if got := chainNames(l); !slices.Equal(got, []string{"shop.example.com", "db.example.com"}) {
		t.Fatalf("chains by SNI %v, want the terminated server's and db's: %s", got, prototext.Format(l))
	}
	fc := l.GetFilterChains()[1]
	var names []string
	for _, f := range fc.GetFilters() {
		names = append(names, f.GetName())
	}
	if !slices.Equal(names, []string{"envoy.filters.network.rbac", tcpProxyFilterName}) {
		t.Errorf("passthrough chain filters %v, want RBAC then tcp_proxy", names)
	}
	tp := &tcpproxy.TcpProxy{}
	if err := fc.GetFilters()[1].GetTypedConfig().UnmarshalTo(tp); err != nil || tp.GetCluster() != "outbound|80||echo.app.svc.cluster.local" {
		t.Errorf("tcp_proxy to %q (%v)", tp.GetCluster(), err)
	}
	if fc.GetTransportSocket() != nil {
		t.Error("a passthrough chain terminates TLS")
	}
	var left []string
	for _, p := range g.RouteProblems(snap, ingress()) {
		left = append(left, p.Name)
	}
	if !slices.Equal(left, []string{"a-shop", "c-db-again"}) {
		t.Errorf("routes reported left out %v, want a-shop (the terminated server's name) and c-db-again (routed twice)", left)
	}
}

// TestTCPServersGetChainsFromRoutes: an opaque TCP server and a TLS
// server terminating TCP have a listener once a tcp route leads
// somewhere, and none without.
func TestTCPServersGetChainsFromRoutes(t *testing.T) {
	opaque := &networkingv1.Server{Port: &networkingv1.Port{Number: 9000, Name: "tcp", Protocol: "TCP"}, Hosts: []string{"*"}}
	terminated := &networkingv1.Server{Port: &networkingv1.Port{Number: 9443, Name: "tls", Protocol: "TLS"}, Hosts: []string{"db.example.com"}, Tls: simple("db")}
	snap := withGateways(modeltest.Load(t, ingressManifests), gateway("istio-system", "gw", ingressSelector, opaque, terminated))
	g := &Generator{TrustDomain: td}
	if c := generate(t, g, snap, ingress()); len(c.listeners) != 0 {
		t.Fatalf("listeners %v without routes", len(c.listeners))
	}
	vs := &model.VirtualService{Meta: model.Meta{Namespace: "istio-system", Name: "tcp"}, Spec: &networkingv1.VirtualService{
		Hosts: []string{"*"}, Gateways: []string{"gw"},
		Tcp: []*networkingv1.TCPRoute{{Route: []*networkingv1.RouteDestination{{Destination: &networkingv1.Destination{Host: "echo.app.svc.cluster.local", Port: &networkingv1.PortSelector{Number: 80}}}}}},
	}}
	c := generate(t, g, withVirtualServices(snap, vs), ingress())
	if l := c.listeners["0.0.0.0_9000"]; len(l.GetFilterChains()) != 1 || l.GetFilterChains()[0].GetFilterChainMatch() != nil || l.GetFilterChains()[0].GetTransportSocket() != nil {
		t.Errorf("opaque TCP listener: %s", prototext.Format(l))
	}
	l := c.listeners["0.0.0.0_9443"]
	if len(l.GetFilterChains()) != 1 || !slices.Equal(chainNames(l), []string{"db.example.com"}) || l.GetFilterChains()[0].GetTransportSocket() == nil {
		t.Errorf("terminated TCP listener: %s", prototext.Format(l))
	}
}
