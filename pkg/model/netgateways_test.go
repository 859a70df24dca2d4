package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseMeshNetworks(t *testing.T) {
	nets, err := ParseMeshNetworks([]byte(`networks:
  net-b:
    endpoints: [{fromRegistry: cluster-b}]
    gateways:
    - {registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local, port: 15443}
    - {address: "2001:db8::1", port: 15443}
  net-a:
    endpoints: [{fromRegistry: Kubernetes}, {fromCidr: 10.10.0.0/16}]
    gateways: [{address: gw.example.com, port: 443}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(nets.Networks) != 2 || nets.Networks[0].Name != "net-a" || nets.Networks[1].Name != "net-b" {
		t.Fatalf("networks %+v, want net-a then net-b", nets.Networks)
	}
	if got := nets.NetworkOfRegistry("cluster-b"); got != "net-b" {
		t.Errorf("network of cluster-b: %q", got)
	}
	if got := nets.NetworkOfRegistry("nowhere"); got != "" {
		t.Errorf("network of an unknown cluster: %q", got)
	}
	var nilNets *MeshNetworks
	if got := nilNets.NetworkOfRegistry("cluster-b"); got != "" {
		t.Errorf("network without meshNetworks: %q", got)
	}
	if empty, err := ParseMeshNetworks(nil); err != nil || len(empty.Networks) != 0 {
		t.Errorf("empty meshNetworks: %v, %v", empty, err)
	}
}

func TestParseMeshNetworksRefusesBadInput(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		b.WriteString("networks:\n")
		for i := range n {
			fmt.Fprintf(&b, "  n%d: {endpoints: [{fromRegistry: c%d}]}\n", i, i)
		}
		return b.String()
	}
	gateways := func(n int) string {
		var b strings.Builder
		b.WriteString("networks:\n  n:\n    gateways:\n")
		for i := range n {
			fmt.Fprintf(&b, "    - {address: 10.0.%d.%d, port: 15443}\n", i/250, i%250)
		}
		return b.String()
	}
	for name, tc := range map[string]struct{ yaml, want string }{
		"a gateway address neither IP nor DNS name": {`networks: {n: {gateways: [{address: "not an address!", port: 15443}]}}`, "neither an IP address nor a DNS name"},
		"a gateway without port":                    {`networks: {n: {gateways: [{address: 10.0.0.1}]}}`, "port 0 is not 1-65535"},
		"a gateway port out of range":               {`networks: {n: {gateways: [{address: 10.0.0.1, port: 70000}]}}`, "port 70000"},
		"a gateway of neither kind":                 {`networks: {n: {gateways: [{port: 15443}]}}`, "neither address nor registryServiceName"},
		"a registryServiceName not a DNS name":      {`networks: {n: {gateways: [{registryServiceName: "a b", port: 15443}]}}`, "not a DNS name"},
		"a fromCidr not a CIDR":                     {`networks: {n: {endpoints: [{fromCidr: 10.0.0.0/33}]}}`, "fromCidr"},
		"a fromRegistry not a DNS label":            {`networks: {n: {endpoints: [{fromRegistry: "a.b"}]}}`, "not a DNS label"},
		"10,000 networks":                           {many(10000), "10000 networks, limit 1024"},
		"a network of 100 gateways":                 {gateways(100), "limit 64"},
		"an unknown field":                          {`networks: {n: {gateway: []}}`, "invalid meshNetworks"},
		"not YAML":                                  {"networks: [", "invalid meshNetworks"},
		"over a MiB":                                {strings.Repeat(" ", MaxMeshNetworksBytes+1), "limit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseMeshNetworks([]byte(tc.yaml))
			if !errors.Is(err, ErrMeshNetworks) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrMeshNetworks naming %q", err, tc.want)
			}
		})
	}
}

// gatewaySvc is Service istio-eastwestgateway of istio-system as cluster
// sees it.
func gatewaySvc(exposures ...Exposure) *Service {
	return &Service{Meta: Meta{Name: "istio-eastwestgateway", Namespace: "istio-system"},
		Hostname: "istio-eastwestgateway.istio-system.svc.cluster.local", Exposures: exposures}
}

func TestComputeNetworkGateways(t *testing.T) {
	nets, err := ParseMeshNetworks([]byte(`networks:
  net-a:
    endpoints: [{fromRegistry: cluster-a}]
    gateways: [{address: 203.0.113.1, port: 15443}, {address: gw.example.com, port: 15443}]
  net-c:
    endpoints: [{fromRegistry: cluster-c}, {fromCidr: 10.30.0.0/16}]
    gateways: [{registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local, port: 443}]
`))
	if err != nil {
		t.Fatal(err)
	}
	svcs := []*Service{gatewaySvc(
		Exposure{Cluster: "cluster-b", Network: "net-b", Addresses: []string{"198.51.100.8", "198.51.100.7"}, Ports: []uint32{15443, 15021}},
		Exposure{Cluster: "cluster-c", Addresses: []string{"192.0.2.30"}, Ports: []uint32{443}},
		Exposure{Cluster: "cluster-d", Network: "net-d", Ports: []uint32{15443}},                                 // no address yet
		Exposure{Cluster: "cluster-e", Network: "net-e", Addresses: []string{"192.0.2.50"}, Ports: []uint32{80}}, // no gateway port
		Exposure{Cluster: "cluster-f", Network: "net-f", GatewayPort: "x", Addresses: []string{"192.0.2.60"}, Ports: []uint32{15443}},
		Exposure{Cluster: "cluster-g", Network: "net-g", Addresses: []string{"192.0.2.70"}, Ports: []uint32{15008}}, // HBONE alone
		Exposure{Cluster: "cluster-x", Addresses: []string{"192.0.2.99"}, Ports: []uint32{443}},                     // a registry of no network
	)}
	g := ComputeNetworkGateways(svcs, nets)
	var got []string
	for _, gw := range g.All() {
		got = append(got, fmt.Sprintf("%s/%s/%s:%d", gw.Network, gw.Cluster, gw.Address, gw.Port))
	}
	want := []string{
		"net-a//203.0.113.1:15443",
		"net-b/cluster-b/198.51.100.7:15443", "net-b/cluster-b/198.51.100.8:15443",
		"net-c/cluster-c/192.0.2.30:443",
		"net-f/cluster-f/192.0.2.60:15443",
		"net-g/cluster-g/192.0.2.70:0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("gateways\n got %v\nwant %v", got, want)
	}
	for _, p := range []string{"gw.example.com", "no ingress address", "has neither port 15443 nor 15008", `"x" is not a port`, "fromCidr 10.30.0.0/16"} {
		if !slices.ContainsFunc(g.Problems, func(s string) bool { return strings.Contains(s, p) }) {
			t.Errorf("no problem naming %q in %q", p, g.Problems)
		}
	}
	if !g.Enabled() || g.Key == "" {
		t.Errorf("enabled %v, key %q", g.Enabled(), g.Key)
	}
	// Per network: 1, 2, 1, 1, 1; per network and cluster the same.
	if g.ScaleFactor() != 2 {
		t.Errorf("scale factor %d, want 2", g.ScaleFactor())
	}
	if gws := g.For("net-b", "cluster-b"); len(gws) != 2 {
		t.Errorf("gateways for net-b: %v", gws)
	}
	if gws := g.For("net-b", "cluster-z"); len(gws) != 2 {
		t.Errorf("gateways for net-b of another cluster: %v, want the network's", gws)
	}
	if gws := g.For("net-g", "cluster-g"); len(gws) != 0 {
		t.Errorf("an HBONE-only gateway is not one for Envoy: %v", gws)
	}
	if gws := g.For("net-d", "cluster-d"); len(gws) != 0 {
		t.Errorf("a gateway without address: %v", gws)
	}
}

func TestNetworkGatewaysPreferTheEndpointsCluster(t *testing.T) {
	nets, err := ParseMeshNetworks([]byte(`networks: {net-b: {gateways: [{address: 203.0.113.9, port: 15443}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	g := ComputeNetworkGateways([]*Service{gatewaySvc(
		Exposure{Cluster: "cluster-b", Network: "net-b", Addresses: []string{"198.51.100.7", "198.51.100.8"}, Ports: []uint32{15443}},
	)}, nets)
	if gws := g.For("net-b", "cluster-b"); len(gws) != 2 || gws[0].Address != "198.51.100.7" {
		t.Errorf("gateways of net-b's cluster-b: %v, want its two", gws)
	}
	if gws := g.For("net-b", "cluster-q"); len(gws) != 3 {
		t.Errorf("gateways of net-b's other clusters: %v, want all three", gws)
	}
	// Per network 3, per network and cluster 2 and 1: lcm 6.
	if g.ScaleFactor() != 6 {
		t.Errorf("scale factor %d, want 6", g.ScaleFactor())
	}
}

func TestNoGatewaysNoNetworksEnabled(t *testing.T) {
	g := ComputeNetworkGateways([]*Service{{Meta: Meta{Name: "a", Namespace: "b"}}}, nil)
	if g.Enabled() || g.Key != "" || g.ScaleFactor() != 1 || len(g.Problems) != 0 {
		t.Errorf("gateways of a mesh without any: %+v", g)
	}
	var none *NetworkGateways
	if none.Enabled() || none.For("n", "c") != nil || none.ScaleFactor() != 1 {
		t.Error("nil gateways are not empty")
	}
}

func TestManyGatewaysAreBounded(t *testing.T) {
	var addrs []string
	for i := range MaxGateways + 10 {
		addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", i/65536, (i/256)%256, i%256))
	}
	g := ComputeNetworkGateways([]*Service{gatewaySvc(Exposure{Cluster: "c", Network: "n", Addresses: addrs, Ports: []uint32{15443}})}, nil)
	if n := len(g.All()); n != MaxGateways {
		t.Errorf("%d gateways, want the limit %d", n, MaxGateways)
	}
	if !slices.ContainsFunc(g.Problems, func(s string) bool { return strings.Contains(s, "more than") }) {
		t.Errorf("the gateways beyond the limit are not reported: %v", g.Problems)
	}
}

func TestSnapshotNetworkGatewaysAreComputedOncePerMeshNetworks(t *testing.T) {
	svc := gatewaySvc(Exposure{Cluster: "c", Network: "n", Addresses: []string{"192.0.2.1"}, Ports: []uint32{15443}})
	snap := Build("v1", Options{}, Resources{Services: []*Service{svc}})
	a, b := snap.NetworkGateways(nil), snap.NetworkGateways(nil)
	if a != b || !a.Enabled() {
		t.Errorf("gateways computed twice (%p, %p) or not found", a, b)
	}
	nets := &MeshNetworks{Networks: []MeshNetwork{{Name: "m", Gateways: []MeshNetworkGateway{{Address: "192.0.2.2", Port: 15443}}}}}
	if c := snap.NetworkGateways(nets); len(c.All()) != 2 || c.Key == a.Key {
		t.Errorf("gateways under other meshNetworks: %v", c.All())
	}
}

func TestAGatewayAddressChangeIsAnEndpointChangeOfNetworkedServices(t *testing.T) {
	ep := func(addr, network string) Endpoint { return Endpoint{Address: addr, Port: 8080, Network: network} }
	echo := &Service{Meta: Meta{Name: "echo", Namespace: "app"}, Hostname: "echo.app.svc.cluster.local", Ports: []Port{{Name: "http", Port: 80}},
		Endpoints: map[uint32][]Endpoint{80: {ep("10.0.0.1", "net-b")}}}
	plain := &Service{Meta: Meta{Name: "plain", Namespace: "app"}, Hostname: "plain.app.svc.cluster.local", Ports: []Port{{Name: "http", Port: 80}},
		Endpoints: map[uint32][]Endpoint{80: {ep("10.0.0.2", "")}}}
	gw := func(addr string) *Service {
		s := gatewaySvc(Exposure{Cluster: "b", Network: "net-b", Addresses: []string{addr}, Ports: []uint32{15443}})
		s.Ports = []Port{{Name: "tls", Port: 15443}}
		return s
	}
	old := BuildShared("v1", Options{}, Resources{Services: []*Service{echo, plain, gw("192.0.2.1")}}, nil)
	next := BuildShared("v2", Options{}, Resources{Services: []*Service{echo, plain, gw("192.0.2.2")}}, old)
	c := Diff(old, next)
	if c.Config {
		t.Fatal("a gateway address change is a configuration change")
	}
	if !c.Services["istio-eastwestgateway.istio-system.svc.cluster.local"] {
		t.Errorf("the gateway Service's change is not one of its service: %+v", c)
	}
	if !c.Endpoints["echo.app.svc.cluster.local"] {
		t.Errorf("the endpoints of a service of net-b are not changed: %+v", c)
	}
	if c.Endpoints["plain.app.svc.cluster.local"] {
		t.Errorf("a service with no endpoint of a network is changed: %+v", c)
	}
}

// TestARegistryServiceIsTheGatewayOfItsClustersNetworkAlone: two networks
// naming one Service by registryServiceName each get the Service of their
// own clusters, as each of Istio's registries reads only its own network.
func TestARegistryServiceIsTheGatewayOfItsClustersNetworkAlone(t *testing.T) {
	nets, err := ParseMeshNetworks([]byte(`networks:
  net-a: {endpoints: [{fromRegistry: a}], gateways: [{registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local, port: 15443}]}
  net-b: {endpoints: [{fromRegistry: b}], gateways: [{registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local, port: 15443}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	g := ComputeNetworkGateways([]*Service{gatewaySvc(
		Exposure{Cluster: "a", Addresses: []string{"192.0.2.10"}, Ports: []uint32{15443}},
		Exposure{Cluster: "b", Addresses: []string{"198.51.100.7"}, Ports: []uint32{15443}},
	)}, nets)
	var got []string
	for _, gw := range g.All() {
		got = append(got, gw.Network+"/"+gw.Cluster+"/"+gw.Address)
	}
	if want := []string{"net-a/a/192.0.2.10", "net-b/b/198.51.100.7"}; !slices.Equal(got, want) {
		t.Errorf("gateways %v, want %v", got, want)
	}
}

// TestNodePortGateways: a NodePort gateway (Exposure.NodePort), whether
// a meshNetworks registryServiceName or its network label makes it one,
// is at its addresses on the node port of its gateway port (the port
// itself when it has none), as Istio's; one whose selector picks no node
// with an external IP, or is not a map of labels, is left out and
// reported; one that is no gateway is not reported.
func TestNodePortGateways(t *testing.T) {
	nets, err := ParseMeshNetworks([]byte(`networks:
  net-n: {endpoints: [{fromRegistry: cluster-n}], gateways: [{registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local, port: 15443}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	g := ComputeNetworkGateways([]*Service{gatewaySvc(
		Exposure{Cluster: "cluster-n", Addresses: []string{"198.51.100.21", "198.51.100.22"}, Ports: []uint32{15021, 15443}, NodePort: true, NodePorts: []uint32{31021, 31443}},
		Exposure{Cluster: "cluster-m", Network: "net-m", Addresses: []string{"192.0.2.40"}, Ports: []uint32{15443}, NodePort: true, NodePorts: []uint32{0}},
		Exposure{Cluster: "cluster-p", Network: "net-p", Ports: []uint32{15443}, NodePort: true, NodePorts: []uint32{31443}},
		Exposure{Cluster: "cluster-q", Network: "net-q", Ports: []uint32{15443}, NodePort: true, NodePorts: []uint32{31443}, NodeSelectorInvalid: true},
		Exposure{Cluster: "cluster-x", Addresses: []string{"192.0.2.99"}, Ports: []uint32{15443}, NodePort: true, NodePorts: []uint32{31443}}, // no gateway
	)}, nets)
	var got []string
	for _, gw := range g.All() {
		got = append(got, fmt.Sprintf("%s/%s/%s:%d", gw.Network, gw.Cluster, gw.Address, gw.Port))
	}
	want := []string{"net-m/cluster-m/192.0.2.40:15443", "net-n/cluster-n/198.51.100.21:31443", "net-n/cluster-n/198.51.100.22:31443"}
	if !slices.Equal(got, want) {
		t.Errorf("gateways\n got %v\nwant %v", got, want)
	}
	for _, want := range []string{
		`gateway Service istio-system/istio-eastwestgateway of cluster "cluster-p" of network net-p: a NodePort gateway (traffic.istio.io/nodeSelector) without externalIPs, and no node it selects has an external IP`,
		`gateway Service istio-system/istio-eastwestgateway of cluster "cluster-q" of network net-q: a NodePort gateway whose traffic.istio.io/nodeSelector is not a JSON map of labels`,
	} {
		if !slices.ContainsFunc(g.Problems, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no problem %q in %q", want, g.Problems)
		}
	}
	if len(g.Problems) != 2 {
		t.Errorf("problems %q, want the two gateways'", g.Problems)
	}
}
