package webhookconfig

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// fakeBundles delivers bundles the way (*ca.CA).Subscribe does: the latest
// undelivered one replaces an older one.
type fakeBundles struct {
	mu   sync.Mutex
	subs []chan *ca.Bundle
	cur  *ca.Bundle
}

func (f *fakeBundles) Subscribe() (<-chan *ca.Bundle, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan *ca.Bundle, 1)
	if f.cur != nil {
		ch <- f.cur
	}
	f.subs = append(f.subs, ch)
	return ch, func() {}
}

// set publishes a bundle whose PEM is pem.
func (f *fakeBundles) set(pem string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = &ca.Bundle{Version: uint64(len(pem)), PEM: []byte(pem)}
	for _, ch := range f.subs {
		select {
		case <-ch:
		default:
		}
		ch <- f.cur
	}
}

func mutatingConfig(name string, webhooks ...string) *admissionregistrationv1.MutatingWebhookConfiguration {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	ignore := admissionregistrationv1.Ignore
	for _, w := range webhooks {
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name: w, FailurePolicy: &ignore, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("old")},
		})
	}
	return cfg
}

func validatingConfig(name string, webhooks ...string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	ignore := admissionregistrationv1.Ignore
	for _, w := range webhooks {
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name: w, FailurePolicy: &ignore, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("old")},
		})
	}
	return cfg
}

// start runs a controller until the test ends.
func start(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.ReadyInterval == 0 {
		cfg.ReadyInterval = 20 * time.Millisecond
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 20 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(cfg).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// eventually polls cond until it holds or the wait runs out.
func eventually(t *testing.T, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", wait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// state reads both configurations: every webhook's caBundle, and the
// validating webhooks' failure policies.
type state struct {
	mutatingCA, validatingCA [][]byte
	validatingPolicy         []string
	mutatingPolicy           []string
}

func readState(t *testing.T, client kubernetes.Interface, mutating, validating string) state {
	t.Helper()
	var s state
	api := client.AdmissionregistrationV1()
	if m, err := api.MutatingWebhookConfigurations().Get(context.Background(), mutating, metav1.GetOptions{}); err == nil {
		for _, w := range m.Webhooks {
			s.mutatingCA = append(s.mutatingCA, w.ClientConfig.CABundle)
			s.mutatingPolicy = append(s.mutatingPolicy, policy(w.FailurePolicy))
		}
	}
	if v, err := api.ValidatingWebhookConfigurations().Get(context.Background(), validating, metav1.GetOptions{}); err == nil {
		for _, w := range v.Webhooks {
			s.validatingCA = append(s.validatingCA, w.ClientConfig.CABundle)
			s.validatingPolicy = append(s.validatingPolicy, policy(w.FailurePolicy))
		}
	}
	return s
}

func policy(p *admissionregistrationv1.FailurePolicyType) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// allEqual reports whether there is at least one bundle and all are want.
func allEqual(bundles [][]byte, want string) bool {
	for _, b := range bundles {
		if !bytes.Equal(b, []byte(want)) {
			return false
		}
	}
	return len(bundles) > 0
}

func allPolicies(ps []string, want string) bool {
	for _, p := range ps {
		if p != want {
			return false
		}
	}
	return len(ps) > 0
}

// countWatches makes client count the watches its callers start, and
// returns a wait for at least n of them. A fake clientset's watch does not
// replay what changed before it started, while an informer reports synced
// once it has listed: a test that edits an object must first wait for the
// watches, or its edit can fall between the list and the watch.
func countWatches(client *fake.Clientset) func(t *testing.T, n int) {
	var mu sync.Mutex
	started := 0
	client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return false, nil, err
		}
		mu.Lock()
		started++
		mu.Unlock()
		return true, w, nil
	})
	return func(t *testing.T, n int) {
		t.Helper()
		eventually(t, wait, "watches started", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return started >= n
		})
	}
}
