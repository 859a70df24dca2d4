package envoygen

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// multiNetworkSnapshot has service echo.app with, on net1, an endpoint
// accepting mTLS; on net2 (cluster c2), two accepting mTLS, one of weight
// 3, and one that does not; on net3, which has no gateway, one; and the
// east-west gateway Service of net2 at two addresses. With gateways, net1
// has the gateway at 192.0.2.1 from meshNetworks.
func multiNetworkSnapshot(t *testing.T) (*model.Snapshot, *model.MeshNetworks) {
	t.Helper()
	ep := func(addr, network, cluster string, mtls bool, weight uint32) model.Endpoint {
		labels := map[string]string{model.NetworkLabel: network, model.ClusterLabel: cluster}
		if mtls {
			labels[model.TLSModeLabel] = "istio"
		}
		return model.Endpoint{Address: addr, Port: 8080, Namespace: "app", ServiceAccount: "echo", Network: network, Cluster: cluster,
			Weight: weight, Labels: labels}
	}
	echo := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
		Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Endpoints: map[uint32][]model.Endpoint{80: {
			ep("10.1.0.1", "net1", "c1", true, 0),
			ep("10.2.0.1", "net2", "c2", true, 0), ep("10.2.0.2", "net2", "c2", true, 3), ep("10.2.0.3", "net2", "c2", false, 0),
			ep("10.3.0.1", "net3", "c3", true, 0),
		}}}
	gw := &model.Service{Meta: model.Meta{Name: "istio-eastwestgateway", Namespace: "istio-system"}, Addresses: []string{"10.96.9.9"},
		Selector:  map[string]string{"istio": "eastwestgateway"},
		Ports:     []model.Port{{Name: "tls", Port: 15443, TargetPort: 15443}},
		Exposures: []model.Exposure{{Cluster: "c2", Network: "net2", Addresses: []string{"198.51.100.8", "198.51.100.7"}, Ports: []uint32{15443}}}}
	nets, err := model.ParseMeshNetworks([]byte(`networks: {net1: {gateways: [{address: 192.0.2.1, port: 15443}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	return model.Build("v1", model.Options{}, model.Resources{Services: []*model.Service{echo, gw}}), nets
}

// weighted lists a load assignment's endpoints as "address:port/weight",
// with "+mtls" when marked, and its localities' weights.
func weighted(cla *endpoint.ClusterLoadAssignment) (eps []string, localities []uint32) {
	for _, l := range cla.GetEndpoints() {
		localities = append(localities, l.GetLoadBalancingWeight().GetValue())
		for _, e := range l.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			s := fmt.Sprintf("%s:%d/%d", a.GetAddress(), a.GetPortValue(), e.GetLoadBalancingWeight().GetValue())
			if e.GetMetadata().GetFilterMetadata()[transportSocketMatchKey].GetFields()["tlsMode"].GetStringValue() == "istio" {
				s += "+mtls"
			}
			eps = append(eps, s)
		}
	}
	slices.Sort(eps)
	return eps, localities
}

func TestSplitHorizonEndpoints(t *testing.T) {
	snap, nets := multiNetworkSnapshot(t)
	const name = "outbound|80||echo.app.svc.cluster.local"
	tests := map[string]struct {
		proxy      *Proxy
		meshNets   *model.MeshNetworks
		want       []string
		wantWeight uint32
	}{
		// net2 has 2 gateways, net1 1: weights scale by 2. net2's two mTLS
		// endpoints (2 and 6) split evenly over its two gateways; its
		// plaintext one is left out; net3, without a gateway, too.
		"a proxy of net1 reaches net2 through its gateways": {
			proxy: &Proxy{Namespace: "app", Network: "net1"}, meshNets: nets,
			want:       []string{"10.1.0.1:8080/2+mtls", "198.51.100.7:15443/4+mtls", "198.51.100.8:15443/4+mtls"},
			wantWeight: 10,
		},
		"the proxy's network may come from its pod's label": {
			proxy: &Proxy{Namespace: "app", Labels: map[string]string{model.NetworkLabel: "net1"}}, meshNets: nets,
			want:       []string{"10.1.0.1:8080/2+mtls", "198.51.100.7:15443/4+mtls", "198.51.100.8:15443/4+mtls"},
			wantWeight: 10,
		},
		"node metadata NETWORK wins over the label": {
			proxy: &Proxy{Namespace: "app", Network: "net2", Labels: map[string]string{model.NetworkLabel: "net1"}}, meshNets: nets,
			want:       []string{"10.2.0.1:8080/2+mtls", "10.2.0.2:8080/6+mtls", "10.2.0.3:8080/2", "192.0.2.1:15443/2+mtls"},
			wantWeight: 12,
		},
		"a proxy of no known network goes through every gateway there is, as Istio's": {
			proxy: &Proxy{Namespace: "app"}, meshNets: nets,
			want:       []string{"10.3.0.1:8080/2+mtls", "192.0.2.1:15443/2+mtls", "198.51.100.7:15443/4+mtls", "198.51.100.8:15443/4+mtls"},
			wantWeight: 12,
		},
		"a proxy of net3 (no gateway of its own) reaches both others through theirs": {
			proxy: &Proxy{Namespace: "app", Network: "net3"}, meshNets: nets,
			want:       []string{"10.3.0.1:8080/2+mtls", "192.0.2.1:15443/2+mtls", "198.51.100.7:15443/4+mtls", "198.51.100.8:15443/4+mtls"},
			wantWeight: 12,
		},
		"without meshNetworks, net1 has no gateway and is left out for net2's proxy": {
			proxy: &Proxy{Namespace: "app", Network: "net2"},
			want:  []string{"10.2.0.1:8080/2+mtls", "10.2.0.2:8080/6+mtls", "10.2.0.3:8080/2"},
			// lcm of net2's 2 gateways
			wantWeight: 10,
		},
	}
	keys := map[string]string{}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			g := &Generator{TrustDomain: td, Mesh: Mesh{Networks: tc.meshNets}}
			c := generate(t, g, snap, tc.proxy)
			got, localities := weighted(c.endpoints[name])
			if !slices.Equal(got, tc.want) {
				t.Errorf("endpoints\n got %v\nwant %v", got, tc.want)
			}
			if len(localities) != 1 || localities[0] != tc.wantWeight {
				t.Errorf("locality weights %v, want [%d]", localities, tc.wantWeight)
			}
			for _, r := range g.Generate(snap, tc.proxy, resource.EndpointType, []string{name}, false) {
				k := fmt.Sprint(tc.meshNets != nil) + r.Key
				if other, ok := keys[k]; ok && !slices.Equal(tests[other].want, tc.want) {
					t.Errorf("shares its load assignment's key with %q", other)
				}
				keys[k] = tname
			}
		})
	}
}

func TestWithoutGatewaysAProxyGetsItsNetworkAlone(t *testing.T) {
	snap := networkedSnapshot()
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", Network: "net1"})
	got, _ := weighted(c.endpoints["outbound|80||echo.app.svc.cluster.local"])
	if want := []string{"10.0.0.1:8080/1+mtls", "10.2.0.1:8080/1+mtls"}; !slices.Equal(got, want) {
		t.Errorf("endpoints %v, want %v", got, want)
	}
}

func TestEndpointScopeNamesTheNetwork(t *testing.T) {
	snap, _ := multiNetworkSnapshot(t)
	g := &Generator{TrustDomain: td}
	a := g.EndpointScope(snap, &Proxy{Namespace: "app", Network: "net1"})
	b := g.EndpointScope(snap, &Proxy{Namespace: "app", Network: "net2"})
	c := g.EndpointScope(snap, &Proxy{Namespace: "app", Labels: map[string]string{model.NetworkLabel: "net1"}})
	if a == b || a != c {
		t.Errorf("endpoint scopes of net1, net2, net1 by label: %q %q %q", a, b, c)
	}
	if g.Scope(snap, &Proxy{Namespace: "app", Network: "net1"}) == g.Scope(snap, &Proxy{Namespace: "app", Network: "net2"}) {
		t.Error("two networks share a scope")
	}
}

// eastWestGateway is the Gateway of Istio's expose-services sample.
func eastWestGateway(hosts ...string) *model.Gateway {
	return gateway("istio-system", "cross-network-gateway", map[string]string{"istio": "eastwestgateway"}, &networkingv1.Server{
		Port: &networkingv1.Port{Number: 15443, Name: "tls", Protocol: "TLS"}, Hosts: hosts,
		Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_AUTO_PASSTHROUGH},
	})
}

func eastWestProxy(network string) *Proxy {
	return &Proxy{Namespace: "istio-system", Labels: map[string]string{"istio": "eastwestgateway"}, IPs: []string{"10.2.9.1"}, Router: true, Network: network}
}

func TestEastWestGateway(t *testing.T) {
	base, nets := multiNetworkSnapshot(t)
	res := *base.Resources()
	res.DestinationRules = []*model.DestinationRule{{Meta: model.Meta{Name: "echo", Namespace: "app"}, Spec: &networkingv1.DestinationRule{
		Host: "echo.app.svc.cluster.local", Subsets: []*networkingv1.Subset{{Name: "v2", Labels: map[string]string{model.ClusterLabel: "c2"}}},
	}}}
	snap := withGateways(model.BuildShared("v2", base.Options, res, nil), eastWestGateway("*.local"))
	g := &Generator{TrustDomain: td, Mesh: Mesh{Networks: nets}}
	c := generate(t, g, snap, eastWestProxy("net2"))
	if ps := g.GatewayProblems(snap, eastWestProxy("net2")); len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	names := []string{
		"outbound_.15443_._.istio-eastwestgateway.istio-system.svc.cluster.local",
		"outbound_.80_._.echo.app.svc.cluster.local",
		"outbound_.80_.v2_.echo.app.svc.cluster.local",
	}
	l := c.listeners["0.0.0.0_15443"]
	if l == nil {
		t.Fatalf("no listener 0.0.0.0_15443: %v", slices.Sorted(maps.Keys(c.listeners)))
	}
	if len(l.GetListenerFilters()) != 1 || l.GetListenerFilters()[0].GetName() != tlsInspectorName {
		t.Errorf("listener filters %v, want the TLS inspector alone", l.GetListenerFilters())
	}
	var chains []string
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		if !slices.Equal(m.GetApplicationProtocols(), istioALPNs) {
			t.Errorf("chain %v matches ALPN %v, want Istio's mTLS ALPNs", m.GetServerNames(), m.GetApplicationProtocols())
		}
		if fc.GetTransportSocket() != nil {
			t.Errorf("chain %v ends TLS", m.GetServerNames())
		}
		last := fc.GetFilters()[len(fc.GetFilters())-1]
		tp := &tcpproxy.TcpProxy{}
		if err := last.GetTypedConfig().UnmarshalTo(tp); err != nil {
			t.Fatal(err)
		}
		if len(m.GetServerNames()) != 1 || tp.GetCluster() != m.GetServerNames()[0] || tp.GetStatPrefix() != tp.GetCluster() {
			t.Errorf("chain %v leads to %q", m.GetServerNames(), tp.GetCluster())
		}
		for _, f := range fc.GetFilters() {
			if strings.Contains(f.GetName(), "rbac") {
				t.Errorf("chain %v authorizes (%s): the workload does", m.GetServerNames(), f.GetName())
			}
		}
		chains = append(chains, m.GetServerNames()...)
	}
	slices.Sort(chains)
	if !slices.Equal(chains, names) {
		t.Errorf("chains\n got %v\nwant %v", chains, names)
	}
	for _, n := range names {
		cl := c.clusters[n]
		if cl == nil {
			t.Errorf("no cluster %s", n)
			continue
		}
		if cl.GetTransportSocket() != nil || len(cl.GetTransportSocketMatches()) > 0 || cl.GetEdsClusterConfig().GetServiceName() != n {
			t.Errorf("cluster %s: TLS %v, matches %d, EDS %q", n, cl.GetTransportSocket(), len(cl.GetTransportSocketMatches()), cl.GetEdsClusterConfig().GetServiceName())
		}
	}
	// The gateway of net2 reaches net2's mTLS endpoints directly, net1's
	// through its gateway; the plaintext endpoint never passes.
	got, _ := weighted(c.endpoints["outbound_.80_._.echo.app.svc.cluster.local"])
	if want := []string{"10.2.0.1:8080/2+mtls", "10.2.0.2:8080/6+mtls", "192.0.2.1:15443/2+mtls"}; !slices.Equal(got, want) {
		t.Errorf("SNI-DNAT endpoints\n got %v\nwant %v", got, want)
	}
	got, _ = weighted(c.endpoints["outbound_.80_.v2_.echo.app.svc.cluster.local"])
	if want := []string{"10.2.0.1:8080/2+mtls", "10.2.0.2:8080/6+mtls"}; !slices.Equal(got, want) {
		t.Errorf("SNI-DNAT subset endpoints\n got %v\nwant %v", got, want)
	}
	// Its ordinary clusters keep the plaintext endpoint.
	got, _ = weighted(c.endpoints["outbound|80||echo.app.svc.cluster.local"])
	if !slices.Contains(got, "10.2.0.3:8080/2") {
		t.Errorf("outbound endpoints %v lack the plaintext one", got)
	}
	// Asked by name, as Envoy asks after CDS.
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType} {
		rs := g.Generate(snap, eastWestProxy("net2"), typeURL, names[1:2], false)
		if len(rs) != 1 || rs[0].Name != names[1] {
			t.Errorf("%s by name: %v", typeURL, rs)
		}
	}
}

func TestEastWestGatewayHostsAndOthers(t *testing.T) {
	base, nets := multiNetworkSnapshot(t)
	g := &Generator{TrustDomain: td, Mesh: Mesh{Networks: nets}}
	// Hosts that match no service leave the server without chains, and
	// no listener; the SNI-DNAT clusters are there all the same, as
	// Istio's.
	snap := withGateways(base, eastWestGateway("*.example.com"))
	c := generate(t, g, snap, eastWestProxy("net2"))
	if _, ok := c.listeners["0.0.0.0_15443"]; ok {
		t.Error("a listener without chains")
	}
	if _, ok := c.clusters["outbound_.80_._.echo.app.svc.cluster.local"]; !ok {
		t.Error("no SNI-DNAT cluster")
	}
	// One host: its chains alone.
	snap = withGateways(base, eastWestGateway("istio-system/echo.app.svc.cluster.local"))
	c = generate(t, g, snap, eastWestProxy("net2"))
	if fcs := c.listeners["0.0.0.0_15443"].GetFilterChains(); len(fcs) != 1 ||
		fcs[0].GetFilterChainMatch().GetServerNames()[0] != "outbound_.80_._.echo.app.svc.cluster.local" {
		t.Errorf("chains of one host: %v", fcs)
	}
	// A sidecar asking for an SNI-DNAT cluster gets nothing, nor a router
	// without AUTO_PASSTHROUGH.
	name := []string{"outbound_.80_._.echo.app.svc.cluster.local"}
	if rs := g.Generate(snap, &Proxy{Namespace: "app"}, resource.ClusterType, name, false); len(rs) != 0 {
		t.Errorf("a sidecar got %v", rs)
	}
	if rs := g.Generate(base, eastWestProxy("net2"), resource.ClusterType, name, false); len(rs) != 0 {
		t.Errorf("a router without AUTO_PASSTHROUGH got %v", rs)
	}
}
