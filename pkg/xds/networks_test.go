package xds

import (
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// networkWorld has service echo.app with one endpoint on net-b accepting
// mTLS, net-b's gateway Service at gatewayIP (none when empty), and
// net-c's gateway Service, labelled but without an address.
func networkWorld(version, gatewayIP string) *model.Snapshot {
	echo := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
		Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Endpoints: map[uint32][]model.Endpoint{80: {{Address: "10.20.0.1", Port: 8080, Namespace: "app", ServiceAccount: "echo",
			Network: "net-b", Cluster: "b", Labels: map[string]string{model.TLSModeLabel: "istio", model.NetworkLabel: "net-b"}}}}}
	gwB := &model.Service{Meta: model.Meta{Name: "eastwest-b", Namespace: "istio-system"}, Addresses: []string{"10.96.9.9"},
		Ports:     []model.Port{{Name: "tls", Port: 15443}},
		Exposures: []model.Exposure{{Cluster: "b", Network: "net-b", Addresses: []string{gatewayIP}, Ports: []uint32{15443}}}}
	gwC := &model.Service{Meta: model.Meta{Name: "eastwest-c", Namespace: "istio-system"}, Addresses: []string{"10.96.9.10"},
		Ports:     []model.Port{{Name: "tls", Port: 15443}},
		Exposures: []model.Exposure{{Cluster: "c", Network: "net-c", Ports: []uint32{15443}}}}
	return model.Build(version, model.Options{}, model.Resources{Services: []*model.Service{echo, gwB, gwC}})
}

// networkNode is an Envoy sidecar's node claiming NETWORK net.
func networkNode(net string) *core.Node {
	n := envoyNode("app", "client", "10.10.0.9")
	n.Metadata.Fields["NETWORK"] = structpb.NewStringValue(net)
	return n
}

func loadAddresses(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		cla := unmarshal[*endpoint.ClusterLoadAssignment](t, a, &endpoint.ClusterLoadAssignment{})
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				s := e.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, fmt.Sprintf("%s:%d", s.GetAddress(), s.GetPortValue()))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestAGatewayAddressChangeRepushesOtherNetworksEndpoints: a proxy of
// net-a (node metadata NETWORK) reaches net-b's endpoint through net-b's
// gateway; when the gateway Service's address changes, the load
// assignment is pushed again with the new address.
func TestAGatewayAddressChangeRepushesOtherNetworksEndpoints(t *testing.T) {
	h := newHarness(t, networkWorld("v1", "198.51.100.7"), nil)
	st := h.stream(clientID)
	const name = "outbound|80||echo.app.svc.cluster.local"
	if err := st.Send(&discovery.DiscoveryRequest{Node: networkNode("net-a"), TypeUrl: resource.EndpointType, ResourceNames: []string{name}}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if got := loadAddresses(t, r); !slices.Equal(got, []string{"198.51.100.7:15443"}) {
		t.Fatalf("endpoints %v, want net-b's gateway", got)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{name}, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo()}); err != nil {
		t.Fatal(err)
	}
	h.store.Publish(networkWorld("v2", "198.51.100.9"))
	r = recv(t, st)
	if got := loadAddresses(t, r); !slices.Equal(got, []string{"198.51.100.9:15443"}) {
		t.Fatalf("endpoints after the gateway moved %v, want its new address", got)
	}
	// net-c's gateway Service without an address is reported.
	waitFor(t, "the gateway left out counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Network", "gateway_left_out")) == 1
	})
}

func TestANetworkWithoutGatewayIsCounted(t *testing.T) {
	snap := networkWorld("v1", "198.51.100.7")
	res := *snap.Resources()
	orphan := &model.Service{Meta: model.Meta{Name: "orphan", Namespace: "app"}, Addresses: []string{"10.96.0.11"},
		Ports: []model.Port{{Name: "http", Port: 80}},
		Endpoints: map[uint32][]model.Endpoint{80: {{Address: "10.40.0.1", Port: 80, Namespace: "app", Network: "net-d",
			Labels: map[string]string{model.TLSModeLabel: "istio"}}}}}
	res.Services = append(slices.Clone(res.Services), orphan)
	h := newHarness(t, model.Build("v1", model.Options{}, res), nil)
	waitFor(t, "the network without gateway counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Network", "no_gateway")) == 1
	})
}

func TestNodeNetworkReachesTheGenerator(t *testing.T) {
	md, err := identity.ParseMetadata(networkNode("net-a").GetMetadata())
	if err != nil {
		t.Fatal(err)
	}
	w, err := identity.WorkloadOf(networkNode("net-a"), md)
	if err != nil || w.Network != "net-a" {
		t.Fatalf("workload %+v, %v", w, err)
	}
}

// TestAnEastWestGatewaysEndpointChangeIsAnEndpointPush: the load
// assignment of an SNI-DNAT cluster follows its service's endpoints as an
// endpoint push, as an outbound cluster's does.
func TestAnEastWestGatewaysEndpointChangeIsAnEndpointPush(t *testing.T) {
	world := func(version string, addrs ...string) *model.Snapshot {
		var eps []model.Endpoint
		for _, a := range addrs {
			eps = append(eps, model.Endpoint{Address: a, Port: 8080, Namespace: "app", ServiceAccount: "echo",
				Labels: map[string]string{model.TLSModeLabel: "istio"}})
		}
		echo := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
			Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}}, Endpoints: map[uint32][]model.Endpoint{80: eps}}
		gw := &model.Gateway{Meta: model.Meta{Namespace: "gw", Name: "cross-network"}, Spec: &networkingv1.Gateway{
			Selector: map[string]string{"istio": "eastwestgateway"},
			Servers: []*networkingv1.Server{{Port: &networkingv1.Port{Number: 15443, Name: "tls", Protocol: "TLS"}, Hosts: []string{"*.local"},
				Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_AUTO_PASSTHROUGH}}},
		}}
		return model.Build(version, model.Options{}, model.Resources{Services: []*model.Service{echo}, Gateways: []*model.Gateway{gw}})
	}
	h := newHarness(t, world("v1", "10.0.0.1"), nil)
	st := h.stream(ingressIdentity)
	const name = "outbound_.80_._.echo.app.svc.cluster.local"
	node := routerNode("gw", "ingress", "10.0.9.1", map[string]any{"istio": "eastwestgateway"}, nil)
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{name}}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if got := loadAddresses(t, r); !slices.Equal(got, []string{"10.0.0.1:8080"}) {
		t.Fatalf("SNI-DNAT endpoints %v", got)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{name}, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo()}); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(h.srv.metrics.pushTriggers.WithLabelValues("endpoint"))
	h.store.Publish(world("v2", "10.0.0.1", "10.0.0.2"))
	r = recv(t, st)
	if got := loadAddresses(t, r); !slices.Equal(got, []string{"10.0.0.1:8080", "10.0.0.2:8080"}) {
		t.Fatalf("SNI-DNAT endpoints after a change %v", got)
	}
	if after := testutil.ToFloat64(h.srv.metrics.pushTriggers.WithLabelValues("endpoint")); after <= before {
		t.Errorf("endpoint push triggers %v → %v: not an endpoint push", before, after)
	}
}

// TestAProxyWithoutNodeNetworkIsOnItsPodsNetwork: a sidecar whose node
// metadata names no NETWORK is on its registry pod's network (the pod's
// label, else its cluster's: the system namespace's label or
// meshNetworks' fromRegistry, which the registry has put in the pod's
// model), so it reaches its network's endpoint directly and the other
// network's through that network's gateway. Without a pod in the
// registry it is of no known network and goes through both gateways.
func TestAProxyWithoutNodeNetworkIsOnItsPodsNetwork(t *testing.T) {
	world := func(pods []*model.Pod) *model.Snapshot {
		mtls := func(net string) map[string]string {
			return map[string]string{model.TLSModeLabel: "istio", model.NetworkLabel: net}
		}
		echo := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
			Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
			Endpoints: map[uint32][]model.Endpoint{80: {
				{Address: "10.10.0.5", Port: 8080, Namespace: "app", ServiceAccount: "echo", Network: "net-a", Cluster: "a", Labels: mtls("net-a")},
				{Address: "10.20.0.1", Port: 8080, Namespace: "app", ServiceAccount: "echo", Network: "net-b", Cluster: "b", Labels: mtls("net-b")},
			}}}
		gateway := func(name, cluster, net, ip string) *model.Service {
			return &model.Service{Meta: model.Meta{Name: name, Namespace: "istio-system"}, Ports: []model.Port{{Name: "tls", Port: 15443}},
				Exposures: []model.Exposure{{Cluster: cluster, Network: net, Addresses: []string{ip}, Ports: []uint32{15443}}}}
		}
		return model.Build("v1", model.Options{}, model.Resources{Pods: pods, Services: []*model.Service{echo,
			gateway("eastwest-a", "a", "net-a", "198.51.100.1"), gateway("eastwest-b", "b", "net-b", "198.51.100.7")}})
	}
	client := &model.Pod{Meta: model.Meta{Name: "client-1", Namespace: "app"}, ServiceAccount: "client",
		Labels: map[string]string{"app": "client"}, IPs: []string{"10.10.0.9"}, Network: "net-a"}
	cases := map[string]struct {
		pods []*model.Pod
		want []string
	}{
		"its pod's network, which its labels do not name": {[]*model.Pod{client}, []string{"10.10.0.5:8080", "198.51.100.7:15443"}},
		"no pod in the registry: no known network":        {[]*model.Pod{}, []string{"198.51.100.1:15443", "198.51.100.7:15443"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, world(tc.pods), nil)
			st := h.stream(clientID)
			node := envoyNode("app", "client", "10.10.0.9")
			if _, ok := node.Metadata.Fields["NETWORK"]; ok {
				t.Fatal("the node names a network")
			}
			const name = "outbound|80||echo.app.svc.cluster.local"
			if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{name}}); err != nil {
				t.Fatal(err)
			}
			if got := loadAddresses(t, recv(t, st)); !slices.Equal(got, tc.want) {
				t.Fatalf("endpoints %v, want %v", got, tc.want)
			}
		})
	}
}

// TestANodePortGatewayIsReported: a meshNetworks registryServiceName
// gateway whose Service is a NodePort gateway (Istio's
// traffic.istio.io/nodeSelector) none of whose selected nodes has an
// external IP is not used: WARN network gateway not used names the
// Service, and
// bulwark_policy_fail_closed{kind="Network",reason="gateway_left_out"}
// counts it.
func TestANodePortGatewayIsReported(t *testing.T) {
	nets, err := model.ParseMeshNetworks([]byte(`networks:
  net-n: {endpoints: [{fromRegistry: cluster-n}], gateways: [{registryServiceName: eastwest.istio-system.svc.cluster.local, port: 15443}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	gw := &model.Service{Meta: model.Meta{Name: "eastwest", Namespace: "istio-system"}, Addresses: []string{"10.96.9.9"},
		Ports:     []model.Port{{Name: "tls", Port: 15443}},
		Exposures: []model.Exposure{{Cluster: "cluster-n", Ports: []uint32{15443}, NodePort: true, NodePorts: []uint32{31443}}}}
	rec, log := logtest.New(t)
	h := newHarness(t, model.Build("v1", model.Options{}, model.Resources{Services: []*model.Service{gw}}), func(c *Config) {
		c.Logger, c.MeshNetworks = log, nets
	})
	waitFor(t, "the NodePort gateway counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Network", "gateway_left_out")) == 1
	})
	waitFor(t, "the NodePort gateway logged", func() bool {
		return rec.Count("network gateway not used", "istio-system/eastwest", "no node it selects has an external IP") == 1
	})
}
