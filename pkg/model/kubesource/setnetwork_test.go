package kubesource

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestSetNetworkPlacesEndpointsAgain: the cluster's network changes (a
// meshNetworks reload): endpoints whose pod names no network move to the
// new one, labels included, and a pod's own label still wins; back to
// none, they name none.
func TestSetNetworkPlacesEndpointsAgain(t *testing.T) {
	kube := newFakeKube(
		newService("ns", "echo", map[string]string{"app": "echo"}, servicePort("http", 80, intstr.FromInt32(8080))),
		newPod("ns", "a", "echo", "10.0.0.1", map[string]string{"app": "echo"}),
		newPod("ns", "b", "echo", "10.0.0.2", map[string]string{"app": "echo", model.NetworkLabel: "net-pod"}),
		newSlice("ns", "echo-1", "echo", map[string]int32{"http": 8080}, podEndpoint("ns", "a", "10.0.0.1"), podEndpoint("ns", "b", "10.0.0.2")),
	)
	store := &recorder{Store: model.NewStore()}
	src, err := New(Config{Client: kube, Publisher: store, EndpointsOnly: true, ClusterID: "c1", Network: "net-1", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, src)
	networks := func(s *model.Snapshot) map[string]string {
		svc := s.Service("echo.ns.svc.cluster.local")
		if svc == nil {
			return nil
		}
		out := map[string]string{}
		for _, ep := range svc.Endpoints[80] {
			out[ep.Address] = ep.Network
			if ep.Labels[model.NetworkLabel] != ep.Network {
				out[ep.Address] += " (label " + ep.Labels[model.NetworkLabel] + ")"
			}
		}
		return out
	}
	want := func(a, b string) func(*model.Snapshot) bool {
		return func(s *model.Snapshot) bool {
			n := networks(s)
			return len(n) == 2 && n["10.0.0.1"] == a && n["10.0.0.2"] == b
		}
	}
	waitFor(t, store.Store, "endpoints on net-1", want("net-1", "net-pod"))
	src.SetNetwork("net-2")
	waitFor(t, store.Store, "endpoints moved to net-2", want("net-2", "net-pod"))
	src.SetNetwork("")
	waitFor(t, store.Store, "endpoints on no network", want("", "net-pod"))
}
