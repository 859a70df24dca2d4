package interop

import (
	"context"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/adsc"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/clusters"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// TestProxyTopologyLabelsMatchIstio: the labels of a proxy's workload, for
// pods of two clusters (the remote one on network net-b by meshNetworks)
// on labelled, beta-labelled, unlabelled and missing nodes, with and
// without locality and network labels of their own, are the labels Istio's
// xDS server gives the same proxies (its kube registry's, then its
// connection's topology labels), each proxy connected to it over ADS with
// its node's name in NODE_NAME as pilot-agent sends it. A Sidecar whose
// workloadSelector names a zone scopes the proxies of that zone alone, in
// Istio's clusters and in Bulwark's alike.
func TestProxyTopologyLabelsMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	node := nodeYAML
	pod := func(name, ip, node, labels string) string { return podYAML(name, ip, node, "client", labels) }
	local := strings.Join([]string{
		node("node-a", "topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z1, topology.istio.io/subzone: s1"),
		node("node-c", "failure-domain.beta.kubernetes.io/region: r2, failure-domain.beta.kubernetes.io/zone: z3"),
		node("node-d", "kubernetes.io/os: linux"),
		mcService("far", 7000, map[string]string{"far-1": "10.10.0.70"}),
		pod("far-1", "10.10.0.70", "node-d", "app: far"),
		mcService("echo", 8080, map[string]string{"echo-1": "10.10.0.80"}),
		pod("echo-1", "10.10.0.80", "node-d", "app: echo"),
		pod("placed", "10.10.0.1", "node-a", "app: client"),
		pod("beta", "10.10.0.2", "node-c", "app: client"),
		pod("bare", "10.10.0.3", "node-d", "app: client"),
		pod("lost", "10.10.0.4", "node-gone", "app: client"),
		pod("own-locality", "10.10.0.5", "node-a", "app: client, istio-locality: r3.z9.s9"),
		pod("own-network", "10.10.0.6", "node-a", "app: client, topology.istio.io/network: net-x"),
		pod("own-zone", "10.10.0.7", "node-d", "app: client, topology.kubernetes.io/zone: z1"),
	}, "---\n")
	remote := strings.Join([]string{
		node("node-b", "topology.kubernetes.io/region: r5, topology.kubernetes.io/zone: z1"),
		pod("remote-placed", "10.20.0.1", "node-b", "app: client"),
		pod("remote-own-network", "10.20.0.2", "node-b", "app: client, topology.istio.io/network: net-y"),
		pod("remote-bare", "10.20.0.3", "node-gone", "app: client"),
	}, "---\n")
	rules := `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: zone-one, namespace: app}
spec:
  workloadSelector: {labels: {topology.kubernetes.io/zone: z1}}
  egress: [{hosts: ["./far.app.svc.cluster.local"]}]
`
	cfgs, _, err := crd.ParseInputs(rules)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfgs {
		cfgs[i].Domain = "cluster.local"
	}
	istioNets := &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net-b": {
		Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: compareRemote}}},
	}}}
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, NetworksWatcher: meshwatcher.NewFixedNetworksWatcher(istioNets),
		KubernetesObjectStringByCluster: map[cluster.ID]string{compareLocal: local, compareRemote: remote}})

	store := model.NewStore()
	_, log := logtest.New(t)
	merger, err := clusters.New(store, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runKubesource(t, decodeKube(t, remote), "", kubesource.Config{Publisher: merger.Remote(compareRemote),
		ClusterID: compareRemote, Network: "net-b", EndpointsOnly: true}))
	t.Cleanup(runKubesource(t, decodeKube(t, local), rules, kubesource.Config{Publisher: merger.Local(), ClusterID: compareLocal}))
	ours := startOurXDS(t, store, compareLocal)

	cases := []struct {
		docs, name, cluster string
		scoped              bool // the zone-one Sidecar selects it
	}{
		{local, "placed", compareLocal, true},
		{local, "beta", compareLocal, false},
		{local, "bare", compareLocal, false},
		{local, "lost", compareLocal, false},
		{local, "own-locality", compareLocal, false},
		{local, "own-network", compareLocal, true},
		{local, "own-zone", compareLocal, true},
		{remote, "remote-placed", compareRemote, true},
		{remote, "remote-own-network", compareRemote, true},
		{remote, "remote-bare", compareRemote, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := podOf(t, tc.docs, tc.name)
			proxy := istioConnectedProxy(t, s, p, tc.cluster)
			w := &identity.Workload{Envoy: true, Namespace: p.Namespace, ServiceAccount: p.Spec.ServiceAccountName, Pod: p.Name,
				ClusterID: tc.cluster, NodeName: p.Spec.NodeName}
			if tc.cluster != compareLocal {
				w.Cluster = tc.cluster
			}
			snap := store.Current()
			got := w.LabelsIn(snap)
			if !maps.Equal(got, proxy.Labels) {
				t.Errorf("labels:\n ours  %v\n Istio %v", got, proxy.Labels)
			}
			selected := proxy.SidecarScope != nil && proxy.SidecarScope.Name == "zone-one"
			if selected != tc.scoped {
				t.Errorf("Istio's Sidecar zone-one selects it: %v, want %v", selected, tc.scoped)
			}
			istioNames := outboundNames(s.Clusters(proxy))
			ourNames := outboundNames(ours.sidecar(t, p, tc.cluster).clusters(t))
			if !slices.Equal(istioNames, ourNames) {
				t.Errorf("outbound clusters:\n ours  %v\n Istio %v", ourNames, istioNames)
			}
			if scoped := !slices.Contains(istioNames, "outbound|80||echo.app.svc.cluster.local"); scoped != tc.scoped {
				t.Errorf("Istio's clusters %v: scoped %v, want %v", istioNames, scoped, tc.scoped)
			}
		})
	}
}

// istioConnectedProxy connects pod's proxy of cluster to Istio's xDS
// server over ADS, as pilot-agent does (node ID naming the pod, NODE_NAME
// its node), and returns the proxy Istio's server made of it.
func istioConnectedProxy(t *testing.T, s *xds.FakeDiscoveryServer, pod *corev1.Pod, clusterID string) *istiomodel.Proxy {
	t.Helper()
	meta := &istiomodel.NodeMetadata{Namespace: pod.Namespace, ServiceAccount: pod.Spec.ServiceAccountName,
		ClusterID: cluster.ID(clusterID), NodeName: pod.Spec.NodeName, IstioVersion: "1.23.0", Labels: pod.Labels}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if s.BufListener != nil {
		opts = append(opts, grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			return s.BufListener.Dial()
		}))
	}
	c, err := adsc.New(s.Listener.Addr().String(), &adsc.ADSConfig{
		Config: adsc.Config{IP: pod.Status.PodIP, NodeType: istiomodel.SidecarProxy, Meta: meta.ToStruct(),
			Namespace: pod.Namespace, Workload: pod.Name, GrpcOpts: opts},
		InitialDiscoveryRequests: []*discoveryv3.DiscoveryRequest{{TypeUrl: v3.ClusterType}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(10*time.Second, v3.ClusterType); err != nil {
		t.Fatal(err)
	}
	id := pod.Name + "." + pod.Namespace
	for _, con := range s.Discovery.Clients() {
		if p := con.Proxy(); p != nil && p.ID == id {
			return p
		}
	}
	t.Fatalf("Istio's server has no connection of %s", id)
	return nil
}

// outboundNames is the sorted names of the outbound clusters of cs.
func outboundNames(cs []*clusterv3.Cluster) []string {
	var out []string
	for _, c := range cs {
		if strings.HasPrefix(c.GetName(), "outbound|") {
			out = append(out, c.GetName())
		}
	}
	slices.Sort(out)
	return out
}
