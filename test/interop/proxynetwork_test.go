package interop

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	"istio.io/istio/pkg/network"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
)

// TestAProxyWithoutNetworkIsOnItsClustersNetwork: in a cluster whose
// istiod namespace is labelled topology.istio.io/network: net-ns, a
// sidecar whose pod names no network and whose node metadata names no
// NETWORK gets net-ns's endpoint directly and net-b's through net-b's
// gateway: the load assignment Istio's generator gives the same proxy
// with NETWORK net-ns (as Istio's injector sets it for that network).
// Istio's own, without NETWORK, goes through net-ns's gateway too.
func TestAProxyWithoutNetworkIsOnItsClustersNetwork(t *testing.T) {
	quietIstioLogs(t)
	local := strings.Join([]string{
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system, labels: {topology.istio.io/network: net-ns}}\n",
		mcService("echo", 8080, map[string]string{"echo-1": "10.30.0.1", "echo-2": "10.30.0.2"}),
		mcPod("echo-1", "echo", "10.30.0.1", "app: echo, security.istio.io/tlsMode: istio"),
		mcPod("echo-2", "echo", "10.30.0.2", "app: echo, security.istio.io/tlsMode: istio, topology.istio.io/network: net-b"),
		mcPod("client-1", "client", "10.30.0.9", "app: client, security.istio.io/tlsMode: istio"),
		networkGateway("gw-ns", "net-ns", "192.0.2.1"),
		networkGateway("gw-b", "net-b", "192.0.2.2"),
	}, "---\n")
	const name = "outbound|80||echo.app.svc.cluster.local"
	// Istio's fake server gives its kube registry no system namespace, so
	// it reads no namespace's network label: Istio's cluster is placed on
	// net-ns by meshNetworks instead (its kube controller reads the label
	// as Bulwark does: TestSystemNamespaceNetworkMatchesIstio).
	istioNets := &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net-ns": {
		Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: compareLocal}}},
	}}}
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{KubernetesObjectString: local, NetworksWatcher: meshwatcher.NewFixedNetworksWatcher(istioNets)})
	client := podOf(t, local, "client-1")
	istio := func(networkID string) []string {
		return istioLoadAssignment(t, s, client, networkID, name, nil)
	}

	store := model.NewStore()
	t.Cleanup(runKubesource(t, decodeKube(t, local), "", kubesource.Config{Publisher: store, ClusterID: compareLocal, SystemNamespace: "istio-system"}))
	loads := startOurXDS(t, store, compareLocal).sidecar(t, client, compareLocal).loads(t, []string{name})
	if len(loads) != 1 {
		t.Fatalf("%d load assignments, want %s", len(loads), name)
	}
	ours := weightedAddresses(loads[0])

	withNetwork, without := istio("net-ns"), istio("")
	t.Logf("ours %v; Istio's with NETWORK net-ns %v, without %v", ours, withNetwork, without)
	if !slices.Equal(ours, withNetwork) {
		t.Errorf("ours %v, Istio's for NETWORK net-ns %v", ours, withNetwork)
	}
	if want := []string{"10.30.0.1:8080", "192.0.2.2:15443"}; !slices.Equal(addressesOnly(ours), want) {
		t.Errorf("ours %v, want net-ns's endpoint and net-b's gateway %v", ours, want)
	}
	if slices.Equal(without, withNetwork) || !slices.Contains(addressesOnly(without), "192.0.2.1:15443") {
		t.Errorf("Istio's without NETWORK %v: expected its own network's gateway (the deliberate difference)", without)
	}
}

// networkGateway is a Service of istio-system labelled with network, at
// external IP ip on port 15443: that network's gateway, as Istio finds
// one.
func networkGateway(name, network, ip string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: istio-system, labels: {topology.istio.io/network: %s}}\n"+
		"spec: {clusterIP: 10.96.9.%d, externalIPs: [%s], ports: [{name: tls, port: 15443}]}\n", name, network, len(name), ip)
}

// istioLoadAssignment is the weighted addresses of the load assignment of
// cluster name that Istio's generator s gives client's sidecar, of
// cluster compareLocal and node metadata NETWORK networkID, its metadata
// set further by mod unless nil.
func istioLoadAssignment(t *testing.T, s *xds.FakeDiscoveryServer, client *corev1.Pod, networkID, name string, mod func(*istiomodel.NodeMetadata)) []string {
	t.Helper()
	md := &istiomodel.NodeMetadata{Namespace: client.Namespace, ServiceAccount: client.Spec.ServiceAccountName, Labels: client.Labels,
		ClusterID: cluster.ID(compareLocal), Network: network.ID(networkID)}
	if mod != nil {
		mod(md)
	}
	proxy := s.SetupProxy(&istiomodel.Proxy{
		Type: istiomodel.SidecarProxy, ID: client.Name + "." + client.Namespace, ConfigNamespace: client.Namespace,
		IPAddresses: []string{client.Status.PodIP}, Labels: client.Labels, Metadata: md,
	})
	for _, cla := range s.Endpoints(proxy) {
		if cla.GetClusterName() == name {
			return weightedAddresses(cla)
		}
	}
	t.Fatalf("Istio's generator gives no load assignment %s", name)
	return nil
}

// weightedAddresses are a load assignment's "<address>:<port>/<weight>",
// sorted.
func weightedAddresses(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d/%d", a.GetAddress(), a.GetPortValue(), e.GetLoadBalancingWeight().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}

// addressesOnly is weighted addresses without their weights.
func addressesOnly(weighted []string) []string {
	out := make([]string, len(weighted))
	for i, w := range weighted {
		out[i], _, _ = strings.Cut(w, "/")
	}
	return out
}
