package kubesource

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// waitTimeout bounds how long a test waits for the source to catch up.
const waitTimeout = 30 * time.Second

// recorder is a Publisher that keeps every version published and forwards
// to a Store.
type recorder struct {
	*model.Store
	mu       sync.Mutex
	versions []string
}

func (r *recorder) Publish(s *model.Snapshot) {
	r.mu.Lock()
	r.versions = append(r.versions, s.Version)
	r.mu.Unlock()
	r.Store.Publish(s)
}

func (r *recorder) published() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.versions...)
}

// testLogger writes the source's logs to t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// runSource runs src until the test ends.
func runSource(t *testing.T, src *Source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitFor waits until the store's snapshot satisfies cond and returns it.
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
			t.Fatalf("no snapshot with %s; the last, version %q: %d services", what, snap.Version, len(snap.Services()))
		}
	}
	return snap
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	kube, istio, store := fake.NewClientset(), istiofake.NewSimpleClientset(), model.NewStore()
	tests := map[string]Config{
		"without a Kubernetes client": {Istio: istio, Publisher: store},
		"without an Istio client":     {Client: kube, Publisher: store},
		"without a publisher":         {Client: kube, Istio: istio},
		"with a negative delay":       {Client: kube, Istio: istio, Publisher: store, Delay: -1},
		"with a negative CRD poll":    {Client: kube, Istio: istio, Publisher: store, CRDPoll: -1},
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestHandlerIgnoresWhatTheModelDoesNotRead(t *testing.T) {
	calls := 0
	h := handler{changed: func(...any) { calls++ }}
	pod := trimPod(echoPod("a", "10.0.0.1"))
	statusOnly := pod.DeepCopy()
	statusOnly.ResourceVersion = "2"
	relabelled := statusOnly.DeepCopy()
	relabelled.Labels["version"] = "v2"
	relabelled.ResourceVersion = "3"
	scheduled := relabelled.DeepCopy()
	scheduled.Spec.NodeName = "n"
	scheduled.ResourceVersion = "4"
	svc := echoService()
	annotated := svc.DeepCopy()
	annotated.ResourceVersion = "2"
	node := trimNode(newNode("n", placed("r", "z", "")))
	heartbeat := node.DeepCopy()
	heartbeat.ResourceVersion = "2"
	rezoned := heartbeat.DeepCopy()
	rezoned.Labels[corev1.LabelTopologyZone] = "z2"
	rezoned.ResourceVersion = "3"

	h.OnUpdate(pod, pod)
	h.OnUpdate(pod, statusOnly)
	h.OnUpdate(svc, svc)
	h.OnUpdate(node, heartbeat)
	if calls != 0 {
		t.Fatalf("resyncs and unread pod and node changes asked for %d rebuilds", calls)
	}
	h.OnUpdate(statusOnly, relabelled)
	h.OnUpdate(relabelled, scheduled)
	h.OnUpdate(svc, annotated)
	h.OnUpdate(heartbeat, rezoned)
	h.OnAdd(svc, false)
	h.OnDelete(svc)
	if calls != 6 {
		t.Fatalf("changes asked for %d rebuilds, want 6", calls)
	}
}

func TestMarkDirtyNeverBlocks(t *testing.T) {
	src, err := New(Config{Client: fake.NewClientset(), Istio: istiofake.NewSimpleClientset(), Publisher: model.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		src.markDirty() // nothing reads: a blocking send would hang the test
	}
}

func TestTransformTrimsPods(t *testing.T) {
	pod := echoPod("a", "10.0.0.1")
	pod.Spec.NodeName = "n"
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pod.Annotations = map[string]string{"big": "value"}
	out, err := transform(pod)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := out.(*corev1.Pod)
	if len(trimmed.Spec.Containers) != 0 || trimmed.Annotations != nil || trimmed.ManagedFields != nil {
		t.Errorf("pod not trimmed: %+v", trimmed)
	}
	if trimmed.Labels["app"] != "echo" || trimmed.Spec.ServiceAccountName != "echo" || trimmed.Status.PodIP != "10.0.0.1" || trimmed.UID != pod.UID ||
		trimmed.Spec.NodeName != "n" {
		t.Errorf("pod lost what the model reads: %+v", trimmed)
	}
	again, _ := transform(trimmed)
	if !samePod(trimmed, again.(*corev1.Pod)) {
		t.Error("transform is not idempotent")
	}
}
