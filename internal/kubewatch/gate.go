package kubewatch

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// MaxRetries bounds how many times the gated transport sends one request
// again after a probe saw the API server answer. An API server that
// answers its probe but keeps failing one request is not an outage: the
// failure then goes back to the caller (client-go's reflector backs off).
const MaxRetries = 3

// Gate holds back the list and watch requests of informers while the API
// server cannot be reached, and lets them go again as soon as a probe sees
// it back.
//
// client-go's reflector retries a failed list or watch on an exponential
// backoff of its own (0.8 s doubling to a 30 s cap, jittered to [30, 60)
// s) that nothing outside it can reset: after an outage of a minute each
// informer relists up to a minute after the API server returned. Behind a
// Gate the reflector never sees the failure: the request waits inside the
// transport for a probe that began after it failed and succeeded, and is
// then sent again, so every informer resyncs within a probe interval of
// the API server's return.
//
// One request is not held: a watch that resumes from a resource version
// the informer already has. Held through an outage, it would be resent
// to an API server whose watch cache starts after that version, be
// refused as expired, and send the reflector to relist only after its
// backoff, from the moment of the return. It fails at once instead, with
// an error the reflector does not retry as a watch: the reflector relists,
// its backoff runs during the outage, and the relist is what waits here.
//
// A prober (istiod's API server monitor) drives the Gate: Start, Probed
// after each probe, Stop when it stops; between Stop and the next Start,
// and before the first, a failure goes back to the caller at once.
type Gate struct {
	mu      sync.Mutex
	running bool
	okAt    time.Time     // when the last successful probe began
	changed chan struct{} // closed and replaced at every probe result, Start and Stop
	kick    chan struct{}
}

// NewGate returns a Gate no prober drives yet.
func NewGate() *Gate {
	return &Gate{changed: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// Start says a prober now drives the Gate.
func (g *Gate) Start() { g.set(func() { g.running = true }) }

// Stop says no prober drives the Gate any more: waiting requests fail
// with their last error.
func (g *Gate) Stop() { g.set(func() { g.running = false }) }

// Probed records the result of a probe that began at start.
func (g *Gate) Probed(start time.Time, ok bool) {
	g.set(func() {
		if ok && start.After(g.okAt) {
			g.okAt = start
		}
	})
}

// Kicked receives a value when a request starts waiting: the prober
// should probe now rather than at its next tick.
func (g *Gate) Kicked() <-chan struct{} { return g.kick }

func (g *Gate) set(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f()
	close(g.changed)
	g.changed = make(chan struct{})
}

// Wait blocks until a probe that began after since succeeded, and then
// reports true; it reports false at once when no prober drives the Gate,
// and when ctx ends or the prober stops first.
func (g *Gate) Wait(ctx context.Context, since time.Time) bool {
	for {
		g.mu.Lock()
		running, ok, changed := g.running, g.okAt.After(since), g.changed
		g.mu.Unlock()
		switch {
		case !running:
			return false
		case ok:
			return true
		}
		select {
		case g.kick <- struct{}{}:
		default: // a kick is pending already
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// Transport wraps next so that a GET it cannot deliver (a connection
// error, or 503 Service Unavailable) waits for the Gate and is sent again,
// at most MaxRetries times. Other requests, and every request while no
// prober drives the Gate, pass through unchanged.
func (g *Gate) Transport(next http.RoundTripper) http.RoundTripper {
	return &gatedTransport{gate: g, next: next}
}

type gatedTransport struct {
	gate *Gate
	next http.RoundTripper
}

func (t *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || (req.Body != nil && req.Body != http.NoBody) {
		return t.next.RoundTrip(req)
	}
	if resumesWatch(req) {
		resp, err := t.next.RoundTrip(req)
		if err != nil && t.gate.driven() {
			return nil, &relistError{cause: err.Error()}
		}
		return resp, err
	}
	ctx := req.Context()
	for retries := 0; ; retries++ {
		resp, err := t.next.RoundTrip(req.Clone(ctx))
		if !undelivered(resp, err) || ctx.Err() != nil || retries == MaxRetries {
			return resp, err
		}
		if !t.gate.Wait(ctx, time.Now()) {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
	}
}

// resumesWatch reports whether req is a watch from a known resource
// version, rather than a list or a watch that begins with the current
// state (sendInitialEvents, the reflector's streaming list).
func resumesWatch(req *http.Request) bool {
	q := req.URL.Query()
	switch q.Get("watch") {
	case "true", "1":
		return q.Get("sendInitialEvents") != "true"
	}
	return false
}

// relistError is what a resumed watch that could not reach the API server
// fails with while a prober drives the Gate. It keeps the cause's text
// but not the cause: client-go's reflector retries a refused watch as a
// watch (and so resends it, expired, after the outage); any other error
// sends it to relist.
type relistError struct{ cause string }

func (e *relistError) Error() string {
	return "API server unreachable; the watch resumes after a relist: " + e.cause
}

func (g *Gate) driven() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}

// undelivered reports whether a round trip failed because the API server
// could not be reached or could not serve, rather than because it refused.
func undelivered(resp *http.Response, err error) bool {
	return err != nil || resp.StatusCode == http.StatusServiceUnavailable
}
