package interop

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	"istio.io/istio/pkg/network"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/clusters"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// gatewayService is a LoadBalancer Service of istio-system selecting the
// east-west gateway pods, with port 15443, labelled as network's gateway
// when network is not empty, at the ingress IPs given.
func gatewayService(network string, ips ...string) string {
	labels := ""
	if network != "" {
		labels = "labels: {topology.istio.io/network: " + network + "}, "
	}
	var ingress []string
	for _, ip := range ips {
		ingress = append(ingress, "{ip: "+ip+"}")
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: istio-eastwestgateway, namespace: istio-system, %suid: ewgw}
spec:
  type: LoadBalancer
  clusterIP: 10.96.9.9
  selector: {istio: eastwestgateway}
  ports: [{name: tls, port: 15443, targetPort: 15443}, {name: status, port: 15021, targetPort: 15021}]
status: {loadBalancer: {ingress: [%s]}}
`, labels, strings.Join(ingress, ", "))
}

// eastWestPod is the east-west gateway's pod, of istio-system.
const eastWestPod = `apiVersion: v1
kind: Pod
metadata: {name: eastwest-1, namespace: istio-system, uid: uid-eastwest-1, labels: {istio: eastwestgateway, app: istio-eastwestgateway}}
spec: {serviceAccountName: istio-eastwestgateway, containers: [{name: istio-proxy, image: proxy}]}
status: {phase: Running, podIP: 10.10.0.20, podIPs: [{ip: 10.10.0.20}]}
`

// crossNetworkGateway is Istio's samples/multicluster/expose-services.yaml
// Gateway: AUTO_PASSTHROUGH on 15443 for every *.local host.
const crossNetworkGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network-gateway, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.local"]
`

// multiNetworkCase is two clusters on two networks, their gateways known
// one way or another.
type multiNetworkCase struct {
	meshNetworks string
	localGateway string // cluster A's gateway Service ("" for none)
	remoteExtra  string // more of cluster B
}

func TestMultiNetworkEndpointsMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	cases := map[string]multiNetworkCase{
		"gateways of labelled Services (two for net-b) and a meshNetworks address": {
			meshNetworks: `networks:
  net-a: {endpoints: [{fromRegistry: Kubernetes}]}
  net-b:
    endpoints: [{fromRegistry: cluster-b}]
    gateways: [{address: 203.0.113.50, port: 15443}]
`,
			localGateway: gatewayService("net-a", "192.0.2.10"),
			remoteExtra:  gatewayService("net-b", "198.51.100.7", "198.51.100.8"),
		},
		"gateways named by meshNetworks registryServiceName": {
			meshNetworks: `networks:
  net-a:
    endpoints: [{fromRegistry: Kubernetes}]
    gateways: [{registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local, port: 15443}]
  net-b:
    endpoints: [{fromRegistry: cluster-b}]
    gateways: [{registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local, port: 15443}]
`,
			localGateway: gatewayService("", "192.0.2.10"),
			remoteExtra:  gatewayService("", "198.51.100.7"),
		},
		"a gateway Service port by networking.istio.io/gatewayPort": {
			meshNetworks: `networks:
  net-a: {endpoints: [{fromRegistry: Kubernetes}]}
  net-b: {endpoints: [{fromRegistry: cluster-b}]}
`,
			localGateway: gatewayService("net-a", "192.0.2.10"),
			remoteExtra: strings.Replace(gatewayService("net-b", "198.51.100.7"),
				"topology.istio.io/network: net-b", "topology.istio.io/network: net-b, networking.istio.io/gatewayPort: '15021'", 1),
		},
	}
	for name, mc := range cases {
		t.Run(name, func(t *testing.T) { runMultiNetworkCase(t, mc) })
	}
}

func runMultiNetworkCase(t *testing.T, mc multiNetworkCase) {
	local := mcService("echo", 8080, map[string]string{"echo-1": "10.10.0.1"}) + "---\n" +
		mcPod("echo-1", "echo", "10.10.0.1", "app: echo, security.istio.io/tlsMode: istio") + "---\n" +
		mcService("local", 8080, map[string]string{"local-1": "10.10.0.5"}) + "---\n" +
		mcPod("local-1", "local", "10.10.0.5", "app: local, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("sleep", "sleep", "10.10.0.9", "app: sleep, security.istio.io/tlsMode: istio") + "---\n" +
		eastWestPod
	if mc.localGateway != "" {
		local += "---\n" + mc.localGateway
	}
	remote := mcService("echo", 9090, map[string]string{"echo-2": "10.20.0.2", "echo-3": "10.20.0.3"}) + "---\n" +
		mcPod("echo-2", "echo-b", "10.20.0.2", "app: echo, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("echo-3", "legacy", "10.20.0.3", "app: echo") + "---\n" +
		mcService("far", 7000, map[string]string{"far-1": "10.20.0.7", "far-2": "10.20.0.8"}) + "---\n" +
		mcPod("far-1", "far", "10.20.0.7", "app: far, security.istio.io/tlsMode: istio") + "---\n" +
		mcPod("far-2", "far", "10.20.0.8", "app: far, security.istio.io/tlsMode: istio")
	if mc.remoteExtra != "" {
		remote += "---\n" + mc.remoteExtra
	}
	rules := `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  subsets:
  - {name: local, labels: {topology.istio.io/cluster: Kubernetes}}
  - {name: remote, labels: {topology.istio.io/cluster: cluster-b}}
---
` + crossNetworkGateway
	cfgs, _, err := crd.ParseInputs(rules)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfgs {
		cfgs[i].Domain = "cluster.local"
	}
	js, err := yaml.YAMLToJSON([]byte(mc.meshNetworks))
	if err != nil {
		t.Fatal(err)
	}
	istioNets := &meshv1alpha1.MeshNetworks{}
	if err := protojson.Unmarshal(js, istioNets); err != nil {
		t.Fatal(err)
	}
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, NetworksWatcher: meshwatcher.NewFixedNetworksWatcher(istioNets),
		KubernetesObjectStringByCluster: map[cluster.ID]string{compareLocal: local, compareRemote: remote}})

	nets, err := model.ParseMeshNetworks([]byte(mc.meshNetworks))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore()
	_, log := logtest.New(t)
	merger, err := clusters.New(store, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopRemote := runKubesource(t, decodeKube(t, remote), "", kubesource.Config{Publisher: merger.Remote(compareRemote),
		ClusterID: compareRemote, Network: nets.NetworkOfRegistry(compareRemote), EndpointsOnly: true})
	defer stopRemote()
	stopLocal := runKubesource(t, decodeKube(t, local), rules, kubesource.Config{Publisher: merger.Local(),
		ClusterID: compareLocal, Network: nets.NetworkOfRegistry(compareLocal)})
	defer stopLocal()
	snap := store.Current()
	g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain), Mesh: envoygen.Mesh{Networks: nets}}
	gws := snap.NetworkGateways(nets)
	if !gws.Enabled() {
		t.Fatalf("no network gateways in our model: %v", gws.Problems)
	}
	t.Logf("our gateways: %v; problems: %v", gws.All(), gws.Problems)
	d := &differences{t: t, scenario: "multinetwork", used: map[int]bool{}, list: []allowedDifference{}}
	compared := 0

	// Sidecars: of net-a, and of no known network (which Istio sends
	// through the gateways of every endpoint's network).
	pod := podOf(t, local, "sleep")
	for _, net := range []string{"net-a", ""} {
		proxy := s.SetupProxy(&istiomodel.Proxy{
			ID: pod.Name + "." + pod.Namespace, ConfigNamespace: pod.Namespace, IPAddresses: []string{pod.Status.PodIP}, Labels: pod.Labels,
			Metadata: &istiomodel.NodeMetadata{Namespace: pod.Namespace, ServiceAccount: pod.Spec.ServiceAccountName, Labels: pod.Labels,
				Network: network.ID(net), ClusterID: compareLocal},
		})
		ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}, Network: net})
		compared += compareWeightedEndpoints(d, "sidecar of network "+orDash(net)+": ", s.Endpoints(proxy), ours.endpoints)
	}

	// The east-west gateway of net-a.
	gwPod := podOf(t, local, "eastwest-1")
	router := s.SetupProxy(&istiomodel.Proxy{
		Type: istiomodel.Router, ID: gwPod.Name + "." + gwPod.Namespace, ConfigNamespace: gwPod.Namespace,
		IPAddresses: []string{gwPod.Status.PodIP}, Labels: gwPod.Labels,
		Metadata: &istiomodel.NodeMetadata{Namespace: gwPod.Namespace, ServiceAccount: gwPod.Spec.ServiceAccountName, Labels: gwPod.Labels,
			Network: "net-a", ClusterID: compareLocal},
	})
	ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: gwPod.Namespace, Labels: gwPod.Labels, IPs: []string{gwPod.Status.PodIP},
		Router: true, Network: "net-a"})
	compared += compareWeightedEndpoints(d, "east-west gateway: ", s.Endpoints(router), ours.endpoints)
	compareEastWestClusters(d, s.Clusters(router), ours.clusters)
	compareEastWestListener(d, s.Listeners(router), ours.listeners)
	if compared < 10 {
		t.Fatalf("only %d load assignments with endpoints compared: the comparison would prove little", compared)
	}
	t.Logf("%d load assignments with endpoints compared", compared)
}

// compareWeightedEndpoints compares every load assignment both generate,
// with weights, and returns how many Istio's had endpoints.
func compareWeightedEndpoints(d *differences, who string, istio, ours []*endpointv3.ClusterLoadAssignment) int {
	d.t.Helper()
	byName := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, cla := range ours {
		byName[cla.GetClusterName()] = cla
	}
	n := 0
	for _, ic := range istio {
		oc, ok := byName[ic.GetClusterName()]
		if !ok {
			d.check(who+"endpoints "+ic.GetClusterName(), "present", "absent", "")
			continue
		}
		if weightedEndpoints(ic) != "" {
			n++
		}
		d.check(who+"endpoints "+ic.GetClusterName(), weightedEndpoints(ic), weightedEndpoints(oc), "")
	}
	return n
}

// weightedEndpoints is a load assignment's localities, sorted, with their
// weights and their endpoints, sorted, with weight and tlsMode mark.
// A locality without endpoints is left out: Istio keeps one when it
// filters all its endpoints out, which Envoy treats as none.
func weightedEndpoints(cla *endpointv3.ClusterLoadAssignment) string {
	var locs []string
	for _, l := range cla.GetEndpoints() {
		if len(l.GetLbEndpoints()) == 0 {
			continue
		}
		var eps []string
		for _, e := range l.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			mode := e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
			eps = append(eps, fmt.Sprintf("%s:%d w=%d tlsMode=%s", a.GetAddress(), a.GetPortValue(), e.GetLoadBalancingWeight().GetValue(), orDash(mode)))
		}
		slices.Sort(eps)
		loc := l.GetLocality()
		locs = append(locs, fmt.Sprintf("%s/%s/%s w=%d [%s]", loc.GetRegion(), loc.GetZone(), loc.GetSubZone(),
			l.GetLoadBalancingWeight().GetValue(), strings.Join(eps, ", ")))
	}
	slices.Sort(locs)
	return strings.Join(locs, "; ")
}

// compareEastWestClusters compares the SNI-DNAT clusters: which there
// are, and of each its discovery, EDS name, TLS and load balancing.
func compareEastWestClusters(d *differences, istio, ours []*clusterv3.Cluster) {
	d.t.Helper()
	shape := func(cs []*clusterv3.Cluster) map[string]string {
		out := map[string]string{}
		for _, c := range cs {
			if !strings.HasPrefix(c.GetName(), "outbound_.") {
				continue
			}
			out[c.GetName()] = fmt.Sprintf("%s eds=%s lb=%s tls=%s", c.GetType(), c.GetEdsClusterConfig().GetServiceName(), c.GetLbPolicy(), clusterTLS(c))
		}
		return out
	}
	is, os := shape(istio), shape(ours)
	if len(is) == 0 {
		d.t.Errorf("Istio's east-west gateway has no SNI-DNAT cluster: the comparison would prove nothing")
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range is {
			if !yield(n) {
				return
			}
		}
		for n := range os {
			if _, ok := is[n]; !ok && !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		d.check("SNI-DNAT cluster "+n, orDash(is[n]), orDash(os[n]), "")
	}
}

// compareEastWestListener compares the AUTO_PASSTHROUGH listener: its
// listener filters and, by SNI, each filter chain's match and filters.
func compareEastWestListener(d *differences, istio, ours []*listenerv3.Listener) {
	d.t.Helper()
	find := func(ls []*listenerv3.Listener) *listenerv3.Listener {
		for _, l := range ls {
			if l.GetName() == "0.0.0.0_15443" {
				return l
			}
		}
		return nil
	}
	il, ol := find(istio), find(ours)
	if il == nil {
		d.t.Fatalf("Istio's east-west gateway has no listener 0.0.0.0_15443")
	}
	if ol == nil {
		d.t.Errorf("our east-west gateway has no listener 0.0.0.0_15443")
		return
	}
	lf := func(l *listenerv3.Listener) string {
		var out []string
		for _, f := range l.GetListenerFilters() {
			out = append(out, f.GetName())
		}
		return strings.Join(out, ", ")
	}
	d.check("east-west listener filters", lf(il), lf(ol), "")
	chains := func(l *listenerv3.Listener) map[string]string {
		out := map[string]string{}
		for _, fc := range l.GetFilterChains() {
			m := fc.GetFilterChainMatch()
			var filters []string
			for _, f := range fc.GetFilters() {
				s := f.GetName()
				if tp := (&tcpproxyv3.TcpProxy{}); f.GetTypedConfig() != nil && f.GetTypedConfig().UnmarshalTo(tp) == nil {
					s += fmt.Sprintf("(cluster=%s stat=%s)", tp.GetCluster(), tp.GetStatPrefix())
				}
				filters = append(filters, s)
			}
			out[strings.Join(m.GetServerNames(), ",")] = fmt.Sprintf("alpn=%v transport=%s tls=%v filters=[%s]",
				m.GetApplicationProtocols(), m.GetTransportProtocol(), fc.GetTransportSocket() != nil, strings.Join(filters, ", "))
		}
		return out
	}
	ic, oc := chains(il), chains(ol)
	if len(ic) < 4 {
		d.t.Errorf("Istio's east-west listener has %d chains: the comparison would prove little", len(ic))
	}
	all := map[string]bool{}
	for k := range ic {
		all[k] = true
	}
	for k := range oc {
		all[k] = true
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range all {
			if !yield(k) {
				return
			}
		}
	}) {
		d.check("east-west chain "+k, orDash(ic[k]), orDash(oc[k]), "")
	}
}
