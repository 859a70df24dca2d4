package kubewatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// flakyTransport fails its first failures round trips with ECONNREFUSED
// (or answers 503 when unavailable is set) and answers 200 after.
type flakyTransport struct {
	failures    int32
	unavailable bool
	calls       atomic.Int32
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	n := f.calls.Add(1)
	if n <= f.failures {
		if f.unavailable {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: io.NopCloser(strings.NewReader("unavailable")), Request: req}, nil
		}
		return nil, &netError{syscall.ECONNREFUSED}
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok")), Request: req}, nil
}

type netError struct{ err error }

func (e *netError) Error() string { return "dial tcp 127.0.0.1:6443: " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

type result struct {
	resp *http.Response
	err  error
}

// roundTrip sends req through rt in the background.
func roundTrip(rt http.RoundTripper, req *http.Request) <-chan result {
	out := make(chan result, 1)
	go func() {
		resp, err := rt.RoundTrip(req)
		out <- result{resp, err}
	}()
	return out
}

// get is a list of namespaces, as a reflector sends it.
func get(t *testing.T, ctx context.Context) *http.Request {
	return request(t, ctx, "https://127.0.0.1:6443/api/v1/namespaces?limit=500&resourceVersion=0")
}

func request(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// kicked waits for a request to start waiting at g.
func kicked(t *testing.T, g *Gate) {
	t.Helper()
	select {
	case <-g.Kicked():
	case <-time.After(10 * time.Second):
		t.Fatal("no request waits at the gate")
	}
}

func TestGateHoldsAFailedGetUntilAProbeAfterItSucceeds(t *testing.T) {
	for name, c := range map[string]struct {
		unavailable bool
		url         string
	}{
		"list, connection refused":      {false, ""},
		"list, 503 Service Unavailable": {true, ""},
		// The reflector's streaming list is a watch that begins with
		// the current state: it is a relist, and waits like one.
		"streaming list, connection refused": {false, "https://127.0.0.1:6443/api/v1/namespaces?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewGate()
			g.Start()
			next := &flakyTransport{failures: 1, unavailable: c.unavailable}
			req := get(t, context.Background())
			if c.url != "" {
				req = request(t, context.Background(), c.url)
			}
			done := roundTrip(g.Transport(next), req)
			kicked(t, g)
			g.Probed(time.Now().Add(-time.Hour), true) // began before the failure: proves nothing
			g.Probed(time.Now(), false)                // still away
			kicked(t, g)                               // so the request asks again
			select {
			case r := <-done:
				t.Fatalf("the request returned (%v, %v) before a probe saw the API server back", r.resp, r.err)
			default:
			}
			if n := next.calls.Load(); n != 1 {
				t.Fatalf("%d round trips while the API server is away, want 1", n)
			}
			g.Probed(time.Now(), true)
			r := <-done
			if r.err != nil || r.resp.StatusCode != http.StatusOK {
				t.Fatalf("after the API server is back: %v, %v; want 200", r.resp, r.err)
			}
			if n := next.calls.Load(); n != 2 {
				t.Errorf("%d round trips, want 2", n)
			}
		})
	}
}

func TestGatePassesFailuresThrough(t *testing.T) {
	refused := func(t *testing.T, r result) {
		t.Helper()
		if !errors.Is(r.err, syscall.ECONNREFUSED) {
			t.Errorf("got %v, %v; want the connection error itself", r.resp, r.err)
		}
	}
	t.Run("no prober drives the gate", func(t *testing.T) {
		next := &flakyTransport{failures: 1}
		refused(t, <-roundTrip(NewGate().Transport(next), get(t, context.Background())))
	})
	t.Run("a write", func(t *testing.T) {
		g := NewGate()
		g.Start()
		req, err := http.NewRequest(http.MethodPost, "https://127.0.0.1:6443/api/v1/namespaces", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		next := &flakyTransport{failures: 1}
		refused(t, <-roundTrip(g.Transport(next), req))
	})
	t.Run("the prober stops", func(t *testing.T) {
		g := NewGate()
		g.Start()
		done := roundTrip(g.Transport(&flakyTransport{failures: 1}), get(t, context.Background()))
		kicked(t, g)
		g.Stop()
		refused(t, <-done)
	})
	t.Run("the request's context ends", func(t *testing.T) {
		g := NewGate()
		g.Start()
		ctx, cancel := context.WithCancel(context.Background())
		done := roundTrip(g.Transport(&flakyTransport{failures: 1}), get(t, ctx))
		kicked(t, g)
		cancel()
		refused(t, <-done)
	})
	t.Run("the API server answers probes but not the request", func(t *testing.T) {
		g := NewGate()
		g.Start()
		next := &flakyTransport{failures: 1000}
		done := roundTrip(g.Transport(next), get(t, context.Background()))
		for range MaxRetries {
			kicked(t, g)
			g.Probed(time.Now(), true)
		}
		refused(t, <-done)
		if n := next.calls.Load(); n != MaxRetries+1 {
			t.Errorf("%d round trips, want %d", n, MaxRetries+1)
		}
	})
}

// TestGateSendsAResumedWatchToRelist: a watch from a resource version
// that cannot reach the API server fails at once, with an error client-go's
// reflector does not retry as a watch (it checks for a refused
// connection), so that the reflector relists, and the relist waits at the
// gate. Held instead, the watch would be resent after the outage with a
// version the restarted API server no longer has.
func TestGateSendsAResumedWatchToRelist(t *testing.T) {
	const resumed = "https://127.0.0.1:6443/api/v1/namespaces?allowWatchBookmarks=true&resourceVersion=217&timeoutSeconds=421&watch=true"
	g := NewGate()
	g.Start()
	next := &flakyTransport{failures: 1}
	var r result
	select {
	case r = <-roundTrip(g.Transport(next), request(t, context.Background(), resumed)):
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed watch is held at the gate")
	}
	if r.err == nil {
		t.Fatalf("got %v; want an error", r.resp)
	}
	if errors.Is(r.err, syscall.ECONNREFUSED) || utilnet.IsConnectionRefused(r.err) {
		t.Errorf("got %v: a refused connection, which the reflector retries as a watch", r.err)
	}
	if !strings.Contains(r.err.Error(), "connection refused") {
		t.Errorf("got %v; want the cause in the text", r.err)
	}
	select {
	case <-g.Kicked():
		t.Error("the resumed watch waited at the gate")
	default:
	}
	if n := next.calls.Load(); n != 1 {
		t.Errorf("%d round trips, want 1", n)
	}

	t.Run("answers and undriven gates are left alone", func(t *testing.T) {
		r := <-roundTrip(g.Transport(&flakyTransport{failures: 1, unavailable: true}), request(t, context.Background(), resumed))
		if r.err != nil || r.resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("503: got %v, %v; want the answer as it came", r.resp, r.err)
		}
		r = <-roundTrip(NewGate().Transport(&flakyTransport{failures: 1}), request(t, context.Background(), resumed))
		if !errors.Is(r.err, syscall.ECONNREFUSED) {
			t.Errorf("no prober: got %v, %v; want the connection error itself", r.resp, r.err)
		}
	})
}

func TestGateLeavesAnswersAlone(t *testing.T) {
	g := NewGate()
	g.Start()
	next := http.RoundTripper(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusForbidden, Body: http.NoBody, Request: req}, nil
	}))
	r := <-roundTrip(g.Transport(next), get(t, context.Background()))
	if r.err != nil || r.resp.StatusCode != http.StatusForbidden {
		t.Errorf("got %v, %v; want the 403 as it came", r.resp, r.err)
	}
	select {
	case <-g.Kicked():
		t.Error("an answer made the request wait")
	default:
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
