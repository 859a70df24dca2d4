package controlplane

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func TestControlsFollowsIstiosRule(t *testing.T) {
	for value, want := range map[string]bool{
		"cluster-a":            true,
		"cluster-b,cluster-a":  true,
		"*":                    true,
		"cluster-b,*":          true,
		",cluster-a,":          true,
		"cluster-b":            false,
		"":                     false,
		" cluster-a":           false, // Istio does not trim either
		"cluster-a ":           false,
		"cluster-a;cluster-b":  false,
		"CLUSTER-A":            false,
		"cluster-*":            false,
		"cluster-b, cluster-a": false,
		"cluster-aa,cluster-b": false,
		",,":                   false,
	} {
		if got := Controls(value, "cluster-a"); got != want {
			t.Errorf("Controls(%q, cluster-a) = %v, want %v", value, got, want)
		}
	}
	if Controls(",", "") {
		t.Error("an empty cluster ID is controlled by an empty item")
	}
}

// recorder is a Duty that reports each start and each end.
type recorder struct {
	starts chan kubernetes.Interface
	ends   chan struct{}
}

func newRecorder() *recorder {
	return &recorder{starts: make(chan kubernetes.Interface, 10), ends: make(chan struct{}, 10)}
}

func (r *recorder) duty(ctx context.Context, _ string, client kubernetes.Interface) {
	r.starts <- client
	<-ctx.Done()
	r.ends <- struct{}{}
}

func (r *recorder) wantStart(t *testing.T, client kubernetes.Interface, what string) {
	t.Helper()
	select {
	case got := <-r.starts:
		if got != client {
			t.Fatalf("%s: the duty got another cluster's client", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the duty did not start", what)
	}
}

func (r *recorder) wantEnd(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.ends:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the duty did not stop", what)
	}
}

func (r *recorder) wantNothing(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.starts:
		t.Fatalf("%s: a duty started", what)
	case <-r.ends:
		t.Fatalf("%s: a duty stopped", what)
	default:
	}
}

// syncLog is a log buffer safe for the controller's goroutines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func (l *syncLog) waitCount(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.count(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("log has %d lines %q, want %d", l.count(s), s, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func annotate(t *testing.T, client kubernetes.Interface, value *string) {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Get(context.Background(), "istio-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if value == nil {
		delete(ns.Annotations, Annotation)
	} else {
		if ns.Annotations == nil {
			ns.Annotations = map[string]string{}
		}
		ns.Annotations[Annotation] = *value
	}
	if _, err := client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ptr(s string) *string { return &s }

// TestDutiesRunWhileTheAnnotationNamesThisCluster walks one remote
// cluster through the annotation's life, its withdrawal, its return with
// another client and istiod's stop: the duty runs exactly while the
// annotation names this cluster and the cluster is registered.
func TestDutiesRunWhileTheAnnotationNamesThisCluster(t *testing.T) {
	rec := newRecorder()
	logs := &syncLog{}
	reg := prometheus.NewRegistry()
	c, err := New(Config{ClusterID: "cluster-a", Namespace: "istio-system", Duty: rec.duty, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	remote := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}})
	c.ClusterAdded("cluster-b", remote) // before Run, as Notify does
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()

	logs.waitCount(t, LogNotControlled, 1)
	rec.wantNothing(t, "namespace not annotated")
	if got := testutil.ToFloat64(c.metric.WithLabelValues("cluster-b")); got != 0 {
		t.Errorf("gauge %v while not controlled", got)
	}

	annotate(t, remote, ptr("cluster-c,cluster-a"))
	rec.wantStart(t, remote, "annotation naming cluster-a")
	if got := c.Controlled(); len(got) != 1 || got[0] != "cluster-b" {
		t.Errorf("Controlled() = %v", got)
	}
	if got := testutil.ToFloat64(c.metric.WithLabelValues("cluster-b")); got != 1 {
		t.Errorf("gauge %v while controlled", got)
	}

	annotate(t, remote, ptr("cluster-c"))
	rec.wantEnd(t, "annotation naming another cluster")
	annotate(t, remote, ptr("*"))
	rec.wantStart(t, remote, "annotation *")
	annotate(t, remote, nil)
	rec.wantEnd(t, "annotation removed")
	annotate(t, remote, ptr("cluster-a"))
	rec.wantStart(t, remote, "annotation back")
	if err := remote.CoreV1().Namespaces().Delete(context.Background(), "istio-system", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.wantEnd(t, "namespace deleted")
	// The duty reports its end just before it returns.
	for deadline := time.Now().Add(10 * time.Second); len(c.Controlled()) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Controlled() = %v after the namespace went", c.Controlled())
		}
	}

	// Withdrawn and registered again with new credentials.
	if _, err := remote.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "istio-system", Annotations: map[string]string{Annotation: "cluster-a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.wantStart(t, remote, "namespace created annotated")
	c.ClusterRemoved("cluster-b")
	rec.wantEnd(t, "remote secret deleted")
	rotated := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "istio-system", Annotations: map[string]string{Annotation: "cluster-a"}}})
	c.ClusterAdded("cluster-b", remote)
	rec.wantStart(t, remote, "registered again")
	c.ClusterAdded("cluster-b", rotated)
	rec.wantEnd(t, "client replaced: the old duty stops")
	rec.wantStart(t, rotated, "client replaced: the new duty")

	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	rec.wantEnd(t, "istiod stopping")
	rec.wantNothing(t, "after Run")
	c.ClusterAdded("cluster-c", rotated)
	rec.wantNothing(t, "a cluster added after Run")
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	duty := func(context.Context, string, kubernetes.Interface) {}
	for name, cfg := range map[string]Config{
		"no cluster ID": {Namespace: "istio-system", Duty: duty},
		"no namespace":  {ClusterID: "a", Duty: duty},
		"no duty":       {ClusterID: "a", Namespace: "istio-system"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
