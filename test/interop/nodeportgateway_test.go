package interop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	kubecontroller "istio.io/istio/pilot/pkg/serviceregistry/kube/controller"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	kubelib "istio.io/istio/pkg/kube"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
)

// TestNodePortGatewaysAreReportedWhereIstioUsesThem: for a meshNetworks
// registryServiceName gateway whose Service is of type NodePort with
// Istio's traffic.istio.io/nodeSelector, Istio's kube controller gives
// the network a gateway at the external IP of each node the selector
// matches, on the node port; Bulwark, from the same objects, gives it
// none and reports the Service as a gateway left out.
func TestNodePortGatewaysAreReportedWhereIstioUsesThem(t *testing.T) {
	quietIstioLogs(t)
	const clusterID = "cluster-n"
	docs := strings.Join([]string{
		"apiVersion: v1\nkind: Node\nmetadata: {name: edge-1, labels: {gateway: \"yes\"}}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}, {type: ExternalIP, address: 198.51.100.21}]}\n",
		"apiVersion: v1\nkind: Node\nmetadata: {name: inner-1, labels: {gateway: \"no\"}}\nstatus: {addresses: [{type: ExternalIP, address: 198.51.100.22}]}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: eastwest, namespace: istio-system, annotations: {traffic.istio.io/nodeSelector: '{\"gateway\": \"yes\"}'}}\n" +
			"spec: {type: NodePort, clusterIP: 10.96.9.9, ports: [{name: tls, port: 15443, nodePort: 31443}]}\n",
	}, "---\n")
	objs := decodeKube(t, docs)
	istioNets := &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net-n": {
		Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: clusterID}}},
		Gateways: []*meshv1alpha1.Network_IstioNetworkGateway{{
			Gw:   &meshv1alpha1.Network_IstioNetworkGateway_RegistryServiceName{RegistryServiceName: "eastwest.istio-system.svc.cluster.local"},
			Port: 15443,
		}},
	}}}
	istio, _ := kubecontroller.NewFakeControllerWithOptions(t, kubecontroller.FakeControllerOptions{Client: kubelib.NewFakeClient(objs...),
		ClusterID: cluster.ID(clusterID), DomainSuffix: "cluster.local", NetworksWatcher: meshwatcher.NewFixedNetworksWatcher(istioNets)})
	var istioGateways []string
	deadline := time.Now().Add(10 * time.Second)
	for len(istioGateways) == 0 && time.Now().Before(deadline) {
		for _, gw := range istio.NetworkGateways() {
			istioGateways = append(istioGateways, fmt.Sprintf("%s/%s/%s:%d", gw.Network, gw.Cluster, gw.Addr, gw.Port))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if want := []string{"net-n/cluster-n/198.51.100.21:31443"}; !slices.Equal(istioGateways, want) {
		t.Fatalf("Istio's gateways %v, want %v (the selected node's external IP, on the node port)", istioGateways, want)
	}

	nets, err := model.ParseMeshNetworks([]byte(`networks:
  net-n: {endpoints: [{fromRegistry: cluster-n}], gateways: [{registryServiceName: eastwest.istio-system.svc.cluster.local, port: 15443}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore()
	_, log := logtest.New(t)
	src, err := kubesource.New(kubesource.Config{Client: kubefake.NewClientset(copies(objs)...), Publisher: store, Logger: log,
		ClusterID: clusterID, Network: "net-n", EndpointsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline = time.Now().Add(10 * time.Second)
	for store.Current() == nil || store.Current().Service("eastwest.istio-system.svc.cluster.local") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the gateway Service is not in the model")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ours := store.Current().NetworkGateways(nets)
	if all := ours.All(); len(all) != 0 {
		t.Errorf("our gateways %v, want none", all)
	}
	want := `gateway Service istio-system/eastwest of cluster "cluster-n" of network net-n: a NodePort gateway (traffic.istio.io/nodeSelector)`
	if !slices.ContainsFunc(ours.Problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
		t.Errorf("problems %q, want one naming the NodePort gateway", ours.Problems)
	}
}
