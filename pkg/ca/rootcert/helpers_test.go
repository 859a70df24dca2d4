package rootcert

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// bundles is a BundleSource whose bundle a test sets.
type bundles struct {
	mu      sync.Mutex
	version uint64
	subs    []chan *ca.Bundle
	current *ca.Bundle
}

func newBundles(pem string) *bundles {
	b := &bundles{}
	b.set(pem)
	return b
}

func (b *bundles) set(pem string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.version++
	b.current = &ca.Bundle{Version: b.version, PEM: []byte(pem)}
	for _, ch := range b.subs {
		select {
		case <-ch:
		default:
		}
		ch <- b.current
	}
}

func (b *bundles) Subscribe() (<-chan *ca.Bundle, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan *ca.Bundle, 1)
	ch <- b.current
	b.subs = append(b.subs, ch)
	return ch, func() {}
}

// withLogger has the controller log to log.
func withLogger(log *slog.Logger) func(*Config) {
	return func(c *Config) { c.Logger = log }
}

// leaseGets counts the reads of Leases through client.
func leaseGets(client *fake.Clientset) *atomic.Int32 {
	var n atomic.Int32
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		return false, nil, nil
	})
	return &n
}

// fastLease makes leader election quick enough for tests.
func fastLease(cfg *Config) {
	cfg.LeaseDuration = 3 * time.Second
	cfg.RenewDeadline = 2 * time.Second
	cfg.RetryPeriod = 200 * time.Millisecond
}

// start runs a controller until the test ends, and returns it and a
// function that stops it early and waits for Run to return. It returns once
// the controller watches namespaces and ConfigMaps: the fake API server
// drops events that happen before a watch starts, a real one does not.
func start(t *testing.T, client *fake.Clientset, src BundleSource, change ...func(*Config)) (*Controller, func()) {
	t.Helper()
	watching := watchSignals(client, "namespaces", "configmaps")
	cfg := Config{
		Client:    client,
		Namespace: "istio-system",
		Identity:  "istiod-test",
		Bundles:   src,
		Logger:    catest.Logger(t),
	}
	fastLease(&cfg)
	for _, f := range change {
		f(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return 10s after its context was cancelled")
			}
		})
	}
	t.Cleanup(stop)
	for resource, ch := range watching {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("the controller did not watch %s within 10s", resource)
		}
	}
	return c, stop
}

// watchSignals returns, per resource, a channel closed once a watch of it
// is registered with client's object tracker.
func watchSignals(client *fake.Clientset, resources ...string) map[string]chan struct{} {
	out := make(map[string]chan struct{}, len(resources))
	once := make(map[string]*sync.Once, len(resources))
	for _, r := range resources {
		out[r], once[r] = make(chan struct{}), new(sync.Once)
	}
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		if o, ok := once[a.GetResource().Resource]; ok {
			o.Do(func() { close(out[a.GetResource().Resource]) })
		}
		return true, w, nil
	})
	return out
}

// eventually polls cond until it holds or 10s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
