package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	kubecontroller "istio.io/istio/pilot/pkg/serviceregistry/kube/controller"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	kubelib "istio.io/istio/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
)

// TestNodePortGatewaysMatchIstio: a meshNetworks registryServiceName
// gateway whose Service is of type NodePort with Istio's
// traffic.istio.io/nodeSelector is, in Bulwark's model as in Istio's kube
// controller for the same objects, at the external IP of each node the
// selector picks, on the node port of the gateway port: at the start, when
// another node is labelled to match, when a node's external IP changes,
// and when a node is deleted.
func TestNodePortGatewaysMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	const clusterID = "cluster-n"
	docs := strings.Join([]string{
		"apiVersion: v1\nkind: Node\nmetadata: {name: edge-1, labels: {gateway: \"yes\"}}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}, {type: ExternalIP, address: 198.51.100.21}]}\n",
		"apiVersion: v1\nkind: Node\nmetadata: {name: inner-1, labels: {gateway: \"no\"}}\nstatus: {addresses: [{type: ExternalIP, address: 198.51.100.22}]}\n",
		"apiVersion: v1\nkind: Node\nmetadata: {name: private-1, labels: {gateway: \"yes\"}}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.3}]}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: eastwest, namespace: istio-system, annotations: {traffic.istio.io/nodeSelector: '{\"gateway\": \"yes\"}'}}\n" +
			"spec: {type: NodePort, clusterIP: 10.96.9.9, ports: [{name: status, port: 15021, nodePort: 31021}, {name: tls, port: 15443, nodePort: 31443}]}\n",
	}, "---\n")
	objs := decodeKube(t, docs)
	istioNets := &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net-n": {
		Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: clusterID}}},
		Gateways: []*meshv1alpha1.Network_IstioNetworkGateway{{
			Gw:   &meshv1alpha1.Network_IstioNetworkGateway_RegistryServiceName{RegistryServiceName: "eastwest.istio-system.svc.cluster.local"},
			Port: 15443,
		}},
	}}}
	istioClient := kubelib.NewFakeClient(objs...)
	istio, _ := kubecontroller.NewFakeControllerWithOptions(t, kubecontroller.FakeControllerOptions{Client: istioClient,
		ClusterID: cluster.ID(clusterID), DomainSuffix: "cluster.local", NetworksWatcher: meshwatcher.NewFixedNetworksWatcher(istioNets)})

	nets, err := model.ParseMeshNetworks([]byte(`networks:
  net-n: {endpoints: [{fromRegistry: cluster-n}], gateways: [{registryServiceName: eastwest.istio-system.svc.cluster.local, port: 15443}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	ourClient, store := runOurSource(t, objs, kubesource.Config{ClusterID: clusterID, Network: "net-n", EndpointsOnly: true})

	istioView := func() string {
		var out []string
		for _, gw := range istio.NetworkGateways() {
			out = append(out, fmt.Sprintf("%s/%s/%s:%d", gw.Network, gw.Cluster, gw.Addr, gw.Port))
		}
		return strings.Join(out, " ")
	}
	ourView := func() string {
		snap := store.Current()
		if snap == nil {
			return ""
		}
		var out []string
		for _, gw := range snap.NetworkGateways(nets).All() {
			out = append(out, fmt.Sprintf("%s/%s/%s:%d", gw.Network, gw.Cluster, gw.Address, gw.Port))
		}
		return strings.Join(out, " ")
	}
	same := func(step, want string) {
		t.Helper()
		if ours, theirs, ok := awaitSameView(ourView, istioView, func(v string) bool { return v == want }); !ok {
			t.Fatalf("%s: ours %q, Istio's %q, want %q", step, ours, theirs, want)
		}
	}
	update := func(name string, change func(*corev1.Node)) {
		t.Helper()
		for _, c := range []kubernetes.Interface{istioClient.Kube(), ourClient} {
			n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			change(n)
			if _, err := c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	same("the selected node with an external IP, on the node port", "net-n/cluster-n/198.51.100.21:31443")
	update("inner-1", func(n *corev1.Node) { n.Labels["gateway"] = "yes" })
	same("another node labelled to match", "net-n/cluster-n/198.51.100.21:31443 net-n/cluster-n/198.51.100.22:31443")
	update("edge-1", func(n *corev1.Node) { n.Status.Addresses[1].Address = "198.51.100.31" })
	same("a node's external IP changed", "net-n/cluster-n/198.51.100.22:31443 net-n/cluster-n/198.51.100.31:31443")
	for _, c := range []kubernetes.Interface{istioClient.Kube(), ourClient} {
		if err := c.CoreV1().Nodes().Delete(context.Background(), "inner-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	same("a node deleted", "net-n/cluster-n/198.51.100.31:31443")
}
