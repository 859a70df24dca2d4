package interop

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	istiomodel "istio.io/istio/pilot/pkg/model"
	kubecontroller "istio.io/istio/pilot/pkg/serviceregistry/kube/controller"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	kubelib "istio.io/istio/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// TestSystemNamespaceNetworkMatchesIstio: the topology.istio.io/network
// label of istiod's namespace is the cluster's network between a pod's
// own label and meshNetworks, as in Istio's kube controller (its
// SystemNamespace): the networks of the endpoints and the labels of the
// proxies of pods with and without a network label equal Istio's (its
// Network and GetProxyWorkloadLabels) with the label set, relabelled,
// removed (meshNetworks' network again) and set again.
func TestSystemNamespaceNetworkMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	docs := strings.Join([]string{
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system, labels: {topology.istio.io/network: net-ns}}\n",
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: app, labels: {topology.istio.io/network: net-app}}\n",
		mcService("echo", 8080, map[string]string{"echo-1": "10.30.0.1", "echo-2": "10.30.0.2"}),
		mcPod("echo-1", "echo", "10.30.0.1", "app: echo"),
		mcPod("echo-2", "echo", "10.30.0.2", "app: echo, topology.istio.io/network: net-pod"),
	}, "---\n")
	objs := decodeKube(t, docs)
	const clusterID = "cluster-n"
	nets := &meshv1alpha1.MeshNetworks{Networks: map[string]*meshv1alpha1.Network{"net-mesh": {
		Endpoints: []*meshv1alpha1.Network_NetworkEndpoints{{Ne: &meshv1alpha1.Network_NetworkEndpoints_FromRegistry{FromRegistry: clusterID}}},
	}}}

	istioClient := kubelib.NewFakeClient(objs...)
	istio, _ := kubecontroller.NewFakeControllerWithOptions(t, kubecontroller.FakeControllerOptions{Client: istioClient,
		ClusterID: cluster.ID(clusterID), SystemNamespace: "istio-system", NetworksWatcher: meshwatcher.NewFixedNetworksWatcher(nets)})

	ourClient, store := runOurSource(t, objs, kubesource.Config{ClusterID: clusterID,
		Network: "net-mesh", SystemNamespace: "istio-system", EndpointsOnly: true})

	// describe is each pod's endpoint network and proxy labels, Istio's
	// or ours.
	istioView := func() string {
		var out []string
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				proxy := &istiomodel.Proxy{ID: p.Name + "." + p.Namespace, IPAddresses: []string{p.Status.PodIP},
					Metadata: &istiomodel.NodeMetadata{Namespace: p.Namespace, ClusterID: cluster.ID(clusterID)}}
				out = append(out, fmt.Sprintf("%s: endpoint %s, proxy %v", p.Name, istio.Network(p.Status.PodIP, p.Labels),
					map[string]string(istio.GetProxyWorkloadLabels(proxy))))
			}
		}
		return strings.Join(out, "\n")
	}
	ourView := func() string {
		snap := store.Current()
		svc := snap.Service("echo.app.svc.cluster.local")
		if svc == nil {
			return "no service"
		}
		network := map[string]string{}
		for _, ep := range svc.Endpoints[80] {
			network[ep.Address] = ep.Network
		}
		var out []string
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				w := &identity.Workload{Envoy: true, Namespace: p.Namespace, ServiceAccount: p.Spec.ServiceAccountName, Pod: p.Name, ClusterID: clusterID}
				out = append(out, fmt.Sprintf("%s: endpoint %s, proxy %v", p.Name, network[p.Status.PodIP], maps.Clone(w.LabelsIn(snap))))
			}
		}
		return strings.Join(out, "\n")
	}
	same := func(step, wantNet string) {
		t.Helper()
		ours, theirs, ok := awaitSameView(ourView, istioView, func(v string) bool { return strings.Contains(v, "echo-1: endpoint "+wantNet+",") })
		if !ok {
			t.Fatalf("%s: ours\n%s\nIstio's\n%s\n(want echo-1 on %q)", step, ours, theirs, wantNet)
		}
		t.Logf("%s:\n%s", step, ours)
	}
	relabel := func(network string) {
		t.Helper()
		for _, c := range []interface {
			Get(context.Context, string, metav1.GetOptions) (*corev1.Namespace, error)
			Update(context.Context, *corev1.Namespace, metav1.UpdateOptions) (*corev1.Namespace, error)
		}{istioClient.Kube().CoreV1().Namespaces(), ourClient.CoreV1().Namespaces()} {
			ns, err := c.Get(context.Background(), "istio-system", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ns.Labels = map[string]string{}
			if network != "" {
				ns.Labels[model.NetworkLabel] = network
			}
			if _, err := c.Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	same("the namespace's label", "net-ns")
	relabel("net-ns2")
	same("relabelled", "net-ns2")
	relabel("")
	same("the label removed: meshNetworks'", "net-mesh")
	relabel("net-ns3")
	same("labelled again", "net-ns3")
}

// runOurSource runs a kubesource.Source of cfg, its client, publisher
// and logger set here, over a fake clientset of copies of objs until the
// test ends; it returns that clientset and the store it publishes into.
func runOurSource(t *testing.T, objs []runtime.Object, cfg kubesource.Config) (*kubefake.Clientset, *model.Store) {
	t.Helper()
	client, store := kubefake.NewClientset(copies(objs)...), model.NewStore()
	_, cfg.Logger = logtest.New(t)
	cfg.Client, cfg.Publisher = client, store
	src, err := kubesource.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return client, store
}

// awaitSameView polls, for up to 10 s, until ours and Istio's views are
// equal and want holds of them, and returns the last two views and
// whether they did.
func awaitSameView(ours, istio func() string, want func(string) bool) (string, string, bool) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, i := ours(), istio()
		if o == i && want(i) {
			return o, i, true
		}
		if time.Now().After(deadline) {
			return o, i, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// copies is a deep copy of each object.
func copies(objs []runtime.Object) []runtime.Object {
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopyObject()
	}
	return out
}
