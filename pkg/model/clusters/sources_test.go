package clusters

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

const waitTimeout = 30 * time.Second

// remoteObjects are a Service echo in ns with one ready pod at ip, as a
// cluster's apiserver serves them.
func remoteObjects(ip string) []runtime.Object {
	ready := true
	port, name := int32(8080), "http"
	return []runtime.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "echo", ResourceVersion: "1"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "echo-1", UID: "uid-1", ResourceVersion: "1",
			Labels: map[string]string{"app": "echo", model.TLSModeLabel: "istio"}},
			Spec:   corev1.PodSpec{ServiceAccountName: "echo"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "echo-1", ResourceVersion: "1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "echo-1", UID: "uid-1"}}}},
	}
}

func waitFor(t *testing.T, store *model.Store, what string, cond func(*model.Snapshot) bool) *model.Snapshot {
	t.Helper()
	updates, cancel := store.Subscribe()
	defer cancel()
	timeout := time.After(waitTimeout)
	snap := store.Current()
	for !cond(snap) {
		select {
		case snap = <-updates:
		case <-timeout:
			t.Fatalf("no snapshot with %s; the last, version %q: %v", what, snap.Version, endpointsOf(snap, echoHost, 80))
		}
	}
	return snap
}

func hasEndpoints(want ...string) func(*model.Snapshot) bool {
	return func(s *model.Snapshot) bool { return slices.Equal(endpointsOf(s, echoHost, 80), want) }
}

func runSources(t *testing.T, s *Sources) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func TestARemoteClusterJoinsTheModelAndLeavesIt(t *testing.T) {
	store := model.NewStore()
	m := newMerger(t, store, testLogger(t))
	s := NewSources(m, model.Options{}, testLogger(t))
	s.ClusterAdded("b", fake.NewClientset(remoteObjects("10.1.0.1")...)) // before Run: started by Run
	if s.Synced("b") {
		t.Error("B synced before its source ran")
	}
	runSources(t, s)
	m.Local().Publish(snapshot("a1", service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1")))
	snap := waitFor(t, store, "B's endpoint", hasEndpoints("10.0.0.1:8080@a", "10.1.0.1:8080@b"))
	// Synced is set once the publish that put B's endpoints in the model
	// has returned: it follows them, never precedes them.
	for deadline := time.Now().Add(waitTimeout); !s.Synced("b"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B's endpoints are in the model but B is not synced")
		}
	}
	for _, ep := range snap.Service(echoHost).Endpoints[80] {
		if ep.Cluster == "b" && (ep.Labels[model.ClusterLabel] != "b" || ep.ServiceAccount != "echo" || ep.TLSMode() != "istio") {
			t.Errorf("B's endpoint lacks its cluster, identity or mTLS label: %+v", ep)
		}
	}
	s.ClusterAdded("b", fake.NewClientset(remoteObjects("10.1.0.2")...)) // new credentials
	waitFor(t, store, "B's endpoint through the new client", hasEndpoints("10.0.0.1:8080@a", "10.1.0.2:8080@b"))
	s.ClusterRemoved("b")
	waitFor(t, store, "B withdrawn", hasEndpoints("10.0.0.1:8080@a"))
	if s.Synced("b") {
		t.Error("B synced after it was removed")
	}
}

func TestRemoteAPIServersThatHangOrAnswerGarbageStallNothing(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("\x00\xffnot kubernetes{{{"))
	}))
	t.Cleanup(func() {
		close(release)
		hang.Close()
		garbage.Close()
	})
	client := func(url string) kubernetes.Interface {
		c, err := kubernetes.NewForConfig(&rest.Config{Host: url})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	store := model.NewStore()
	m := newMerger(t, store, testLogger(t))
	s := NewSources(m, model.Options{}, testLogger(t))
	runSources(t, s)
	s.ClusterAdded("hang", client(hang.URL))
	s.ClusterAdded("garbage", client(garbage.URL))
	s.ClusterAdded("b", fake.NewClientset(remoteObjects("10.1.0.1")...))
	m.Local().Publish(snapshot("a1", service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1")))
	waitFor(t, store, "B's endpoint beside the local one", hasEndpoints("10.0.0.1:8080@a", "10.1.0.1:8080@b"))
	m.Local().Publish(snapshot("a2", service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.2")))
	waitFor(t, store, "a local change", hasEndpoints("10.0.0.2:8080@a", "10.1.0.1:8080@b"))
	if got := m.Clusters(); len(got) != 1 || got["b"] != 1 {
		t.Errorf("clusters in the model: %v, want b alone", got)
	}
	if s.Synced("hang") || s.Synced("garbage") || !s.Synced("b") {
		t.Errorf("synced: hang %t, garbage %t, b %t; want only b", s.Synced("hang"), s.Synced("garbage"), s.Synced("b"))
	}
	done := make(chan struct{})
	go func() {
		s.ClusterRemoved("hang")
		s.ClusterRemoved("garbage")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("removing a hanging cluster blocked")
	}
}

// TestAMeshNetworksChangeMovesARemoteClustersEndpoints: meshNetworks'
// fromRegistry names B's network; when it changes, B's running source
// places its endpoints on the new network, and one added later starts on
// it.
func TestAMeshNetworksChangeMovesARemoteClustersEndpoints(t *testing.T) {
	nets := func(yaml string) *model.MeshNetworks {
		n, err := model.ParseMeshNetworks([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	store := model.NewStore()
	m := newMerger(t, store, testLogger(t))
	s := NewSourcesWithNetworks(m, model.Options{}, nets(`networks: {net-1: {endpoints: [{fromRegistry: b}]}}`), testLogger(t))
	s.ClusterAdded("b", fake.NewClientset(remoteObjects("10.1.0.1")...))
	runSources(t, s)
	m.Local().Publish(snapshot("a1", service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1")))
	network := func(want string) func(*model.Snapshot) bool {
		return func(snap *model.Snapshot) bool {
			svc := snap.Service(echoHost)
			if svc == nil {
				return false
			}
			for _, ep := range svc.Endpoints[80] {
				if ep.Cluster == "b" {
					return ep.Network == want && ep.Labels[model.NetworkLabel] == want
				}
			}
			return false
		}
	}
	waitFor(t, store, "B's endpoint on net-1", network("net-1"))
	s.SetNetworks(nets(`networks: {net-2: {endpoints: [{fromRegistry: b}]}}`))
	waitFor(t, store, "B's endpoint on net-2", network("net-2"))
	s.ClusterAdded("b", fake.NewClientset(remoteObjects("10.1.0.2")...)) // a new source
	waitFor(t, store, "B's new source on net-2", func(snap *model.Snapshot) bool {
		return network("net-2")(snap) && slices.Contains(endpointsOf(snap, echoHost, 80), "10.1.0.2:8080@b")
	})
}
