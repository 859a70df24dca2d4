package kubesource

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestTheSystemNamespacesNetworkLabelPlacesTheCluster(t *testing.T) {
	system := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system", Labels: map[string]string{model.NetworkLabel: "net-ns"}}}
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{model.NetworkLabel: "net-other"}}}
	kube := newFakeKube(system, other,
		newService("ns", "echo", map[string]string{"app": "echo"}, servicePort("http", 80, intstr.FromInt32(8080))),
		newPod("ns", "a", "echo", "10.0.0.1", map[string]string{"app": "echo"}),
		newPod("ns", "b", "echo", "10.0.0.2", map[string]string{"app": "echo", model.NetworkLabel: "net-pod"}),
		newSlice("ns", "echo-1", "echo", map[string]int32{"http": 8080}, podEndpoint("ns", "a", "10.0.0.1"), podEndpoint("ns", "b", "10.0.0.2")),
	)
	store := &recorder{Store: model.NewStore()}
	src, err := New(Config{Client: kube, Publisher: store, EndpointsOnly: true, ClusterID: "c1", Network: "net-mesh",
		SystemNamespace: "istio-system", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, src)
	// want: the networks of pod a's endpoint and model, and pod b's endpoint.
	want := func(a, b string) func(*model.Snapshot) bool {
		return func(s *model.Snapshot) bool {
			svc := s.Service("echo.ns.svc.cluster.local")
			if svc == nil || len(svc.Endpoints[80]) != 2 || s.Pod("ns", "a") == nil {
				return false
			}
			eps := svc.Endpoints[80]
			return eps[0].Network == a && eps[0].Labels[model.NetworkLabel] == a && s.Pod("ns", "a").Network == a &&
				eps[1].Network == b && s.Pod("ns", "b").Network == b
		}
	}
	waitFor(t, store.Store, "the namespace's network, ahead of meshNetworks'", want("net-ns", "net-pod"))

	ctx := context.Background()
	system.Labels[model.NetworkLabel] = "net-ns2"
	if _, err := kube.CoreV1().Namespaces().Update(ctx, system, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, store.Store, "the relabelled namespace's network", want("net-ns2", "net-pod"))
	src.SetNetwork("net-mesh2") // meshNetworks changes: the label still wins
	system.Labels = nil
	if _, err := kube.CoreV1().Namespaces().Update(ctx, system, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, store.Store, "meshNetworks' network once the label is gone", want("net-mesh2", "net-pod"))
	system.Labels = map[string]string{model.NetworkLabel: "net-ns3"}
	if _, err := kube.CoreV1().Namespaces().Update(ctx, system, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, store.Store, "the label again", want("net-ns3", "net-pod"))
	if err := kube.CoreV1().Namespaces().Delete(ctx, "istio-system", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// As in Istio, a deleted namespace leaves its network: a rebuild after
	// the deletion (a new pod's) still has it.
	canary := newPod("ns", "canary", "echo", "10.0.0.9", map[string]string{"app": "other"})
	if _, err := kube.CoreV1().Pods("ns").Create(ctx, canary, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, store.Store, "the canary", func(s *model.Snapshot) bool { return s.Pod("ns", "canary") != nil })
	if !want("net-ns3", "net-pod")(store.Current()) {
		t.Error("the namespace's deletion moved the cluster off its network")
	}
}
