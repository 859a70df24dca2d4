package authn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// fakeReviewer answers every review with the same result and counts calls.
type fakeReviewer struct {
	mu        sync.Mutex
	review    *TokenReview
	err       error
	calls     int
	audiences []string
}

func (f *fakeReviewer) Review(_ context.Context, _ string, audiences []string) (*TokenReview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.audiences = audiences
	if f.err != nil {
		return nil, f.err
	}
	r := *f.review
	return &r, nil
}

func (f *fakeReviewer) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// goodReview is what the API server says about a pod-bound token of
// default/httpbin.
func goodReview() *TokenReview {
	return &TokenReview{
		Authenticated: true,
		Audiences:     []string{"istio-ca"},
		Username:      "system:serviceaccount:default:httpbin",
		Groups:        []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
		Extra: map[string][]string{
			extraPodName: {"httpbin-7d9c"},
			extraPodUID:  {"0b9f-uid"},
		},
	}
}

func TestKubeJWT(t *testing.T) {
	token := unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix()})
	tests := map[string]struct {
		edit       func(*TokenReview)
		reviewErr  error
		podBound   bool
		ctx        context.Context
		wantErr    error
		wantPod    *Pod
		wantID     string
		wantCalled bool
	}{
		"a pod-bound service-account token is accepted": {
			wantID:  workloadID,
			wantPod: &Pod{Name: "httpbin-7d9c", UID: "0b9f-uid"},
		},
		"a token without a pod binding is accepted when binding is not required": {
			edit:   func(r *TokenReview) { r.Extra = nil },
			wantID: workloadID,
		},
		"a token without a pod binding is refused when binding is required": {
			edit:     func(r *TokenReview) { r.Extra = nil },
			podBound: true,
			wantErr:  ErrInvalidToken,
		},
		"a pod binding with a name and no uid is refused": {
			edit:    func(r *TokenReview) { delete(r.Extra, extraPodUID) },
			wantErr: ErrInvalidToken,
		},
		"a pod binding with two names is refused": {
			edit:    func(r *TokenReview) { r.Extra[extraPodName] = []string{"a", "b"} },
			wantErr: ErrInvalidToken,
		},
		"an unauthenticated token is refused": {
			edit:    func(r *TokenReview) { r.Authenticated = false; r.Error = "token has expired" },
			wantErr: ErrInvalidToken,
		},
		"a token for other audiences is refused": {
			edit:    func(r *TokenReview) { r.Audiences = []string{"https://kubernetes.default.svc"} },
			wantErr: ErrInvalidToken,
		},
		"a review confirming no audience is refused": {
			edit:    func(r *TokenReview) { r.Audiences = nil },
			wantErr: ErrInvalidToken,
		},
		"a user outside system:serviceaccounts is refused": {
			edit:    func(r *TokenReview) { r.Groups = []string{"system:authenticated"} },
			wantErr: ErrInvalidIdentity,
		},
		"a username with five parts is refused": {
			edit:    func(r *TokenReview) { r.Username = "system:serviceaccount:a:b:c" },
			wantErr: ErrInvalidIdentity,
		},
		"a username with three parts is refused": {
			edit:    func(r *TokenReview) { r.Username = "system:serviceaccount:default" },
			wantErr: ErrInvalidIdentity,
		},
		"a username with an empty namespace is refused": {
			edit:    func(r *TokenReview) { r.Username = "system:serviceaccount::httpbin" },
			wantErr: ErrInvalidIdentity,
		},
		"a username that is not a service account is refused": {
			edit:    func(r *TokenReview) { r.Username = "kubernetes-admin" },
			wantErr: ErrInvalidIdentity,
		},
		"a username that is not a valid SPIFFE path is refused": {
			edit:    func(r *TokenReview) { r.Username = "system:serviceaccount:default:http bin" },
			wantErr: ErrInvalidIdentity,
		},
		"a username naming the parent directory is refused": {
			edit:    func(r *TokenReview) { r.Username = "system:serviceaccount:..:httpbin" },
			wantErr: ErrInvalidIdentity,
		},
		"an API server that cannot be reached fails closed": {
			reviewErr: errors.New("connection refused"),
			wantErr:   ErrUnavailable,
		},
		"a request without a bearer token has no credentials": {
			ctx:     context.Background(),
			wantErr: ErrNoCredentials,
		},
		"a request with basic authorization has no credentials": {
			ctx:     mdContext("authorization", "Basic dXNlcjpwYXNz"),
			wantErr: ErrNoCredentials,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			review := goodReview()
			if tc.edit != nil {
				tc.edit(review)
			}
			rev := &fakeReviewer{review: review, err: tc.reviewErr}
			k := NewKubeJWT(KubeJWTConfig{
				TrustDomain:     testTD,
				Reviewer:        rev,
				ClusterID:       "east",
				RequirePodBound: tc.podBound,
				Clock:           func() time.Time { return t0 },
			})
			ctx := tc.ctx
			if ctx == nil {
				ctx = bearerContext(token, "clusterid", "east")
			}
			caller, err := k.Authenticate(ctx)
			if !checkCaller(t, caller, err, wantCaller{err: tc.wantErr, id: tc.wantID, kind: KindKubernetes, clusterID: "east", pod: tc.wantPod}) {
				return
			}
			if !slices.Equal(rev.audiences, []string{"istio-ca"}) {
				t.Errorf("reviewed for audiences %q, want [istio-ca]", rev.audiences)
			}
		})
	}
}

func TestKubeJWTAudiencesConfigured(t *testing.T) {
	review := goodReview()
	review.Audiences = []string{"mesh"}
	rev := &fakeReviewer{review: review}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, Audiences: []string{"other", "mesh"}})
	if _, err := k.Authenticate(bearerContext(unsignedJWT(t, map[string]any{}))); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rev.audiences, []string{"other", "mesh"}) {
		t.Errorf("reviewed for audiences %q, want [other mesh]", rev.audiences)
	}
}

func TestKubeJWTCache(t *testing.T) {
	tests := map[string]struct {
		claims    map[string]any
		ttl       time.Duration
		advance   time.Duration
		wantCalls int
	}{
		"a second request within the cache TTL reuses the review": {
			claims:    map[string]any{"exp": t0.Add(time.Hour).Unix()},
			advance:   DefaultCacheTTL - time.Second,
			wantCalls: 1,
		},
		"a review is not reused past the cache TTL": {
			claims:    map[string]any{"exp": t0.Add(time.Hour).Unix()},
			advance:   DefaultCacheTTL,
			wantCalls: 2,
		},
		"a review is not reused past the token's exp": {
			claims:    map[string]any{"exp": t0.Add(time.Minute).Unix()},
			advance:   time.Minute,
			wantCalls: 2,
		},
		"a review is reused until just before the token's exp": {
			claims:    map[string]any{"exp": t0.Add(time.Minute).Unix()},
			advance:   time.Minute - time.Second,
			wantCalls: 1,
		},
		"a token without exp is not cached": {
			claims:    map[string]any{"sub": "system:serviceaccount:default:httpbin"},
			wantCalls: 2,
		},
		"a token with a non-numeric exp is not cached": {
			claims:    map[string]any{"exp": "tomorrow"},
			wantCalls: 2,
		},
		"a token already expired by our clock is not cached": {
			claims:    map[string]any{"exp": t0.Add(-time.Second).Unix()},
			wantCalls: 2,
		},
		"a fractional exp is honoured": {
			claims:    map[string]any{"exp": float64(t0.Add(time.Minute).Unix()) + 0.5},
			advance:   30 * time.Second,
			wantCalls: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := catest.NewClock(t0)
			rev := &fakeReviewer{review: goodReview()}
			k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, CacheTTL: tc.ttl, Clock: clock.Now})
			ctx := bearerContext(unsignedJWT(t, tc.claims))
			if _, err := k.Authenticate(ctx); err != nil {
				t.Fatal(err)
			}
			clock.Advance(tc.advance)
			caller, err := k.Authenticate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if caller.Identities[0].String() != workloadID || caller.Pod == nil {
				t.Errorf("second caller = %+v", caller)
			}
			if got := rev.Calls(); got != tc.wantCalls {
				t.Errorf("reviewer called %d times, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestKubeJWTDoesNotCacheRefusals(t *testing.T) {
	review := goodReview()
	review.Authenticated = false
	rev := &fakeReviewer{review: review}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, Clock: func() time.Time { return t0 }})
	ctx := bearerContext(unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix()}))
	for range 2 {
		if _, err := k.Authenticate(ctx); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("error = %v, want %v", err, ErrInvalidToken)
		}
	}
	rev.mu.Lock()
	rev.review = goodReview()
	rev.mu.Unlock()
	if _, err := k.Authenticate(ctx); err != nil {
		t.Fatalf("after the token became valid: %v", err)
	}
	if got := rev.Calls(); got != 3 {
		t.Errorf("reviewer called %d times, want 3", got)
	}
}

func TestKubeJWTCacheIsBounded(t *testing.T) {
	rev := &fakeReviewer{review: goodReview()}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, CacheSize: 3, Clock: func() time.Time { return t0 }})
	tokens := make([]string, 5)
	for i := range tokens {
		tokens[i] = unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix(), "jti": fmt.Sprint(i)})
		if _, err := k.Authenticate(bearerContext(tokens[i])); err != nil {
			t.Fatal(err)
		}
		if n := k.cache.len(); n > 3 {
			t.Fatalf("cache holds %d entries, bound 3", n)
		}
	}
	// The three most recent tokens are cached; the oldest two were evicted.
	calls := rev.Calls()
	for _, tok := range tokens[2:] {
		if _, err := k.Authenticate(bearerContext(tok)); err != nil {
			t.Fatal(err)
		}
	}
	if got := rev.Calls(); got != calls {
		t.Errorf("recent tokens reviewed again: %d calls, want %d", got, calls)
	}
	if _, err := k.Authenticate(bearerContext(tokens[0])); err != nil {
		t.Fatal(err)
	}
	if got := rev.Calls(); got != calls+1 {
		t.Errorf("evicted token: %d calls, want %d", got, calls+1)
	}
}

func TestKubeJWTCachedCallerIsACopy(t *testing.T) {
	rev := &fakeReviewer{review: goodReview()}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, Clock: func() time.Time { return t0 }})
	ctx := bearerContext(unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix()}))
	first, err := k.Authenticate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first.Pod.Name = "changed"
	second, err := k.Authenticate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Pod.Name != "httpbin-7d9c" {
		t.Errorf("cached pod name = %q, want httpbin-7d9c", second.Pod.Name)
	}
}

func TestKubeJWTRefusesOversizedTokens(t *testing.T) {
	rev := &fakeReviewer{review: goodReview()}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev})
	huge := string(make([]byte, MaxTokenSize+1))
	if _, err := k.authenticateToken(context.Background(), "", rev, huge); !errors.Is(err, ErrTokenTooLarge) {
		t.Fatalf("error = %v, want %v", err, ErrTokenTooLarge)
	}
	if rev.Calls() != 0 {
		t.Error("oversized token was sent for review")
	}
}

func TestKubeJWTWithoutReviewerFailsClosed(t *testing.T) {
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD})
	if _, err := k.Authenticate(bearerContext("a.b.c")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error = %v, want %v", err, ErrUnavailable)
	}
}

func BenchmarkKubeJWTCached(b *testing.B) {
	rev := &fakeReviewer{review: goodReview()}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, ClusterID: "east", Clock: func() time.Time { return t0 }})
	ctx := bearerContext(unsignedJWT(b, map[string]any{"exp": t0.Add(time.Hour).Unix()}), "clusterid", "east")
	if _, err := k.Authenticate(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := k.Authenticate(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	if rev.Calls() != 1 {
		b.Fatalf("reviewer called %d times, want 1", rev.Calls())
	}
}

func TestKubeJWTConcurrentRequests(t *testing.T) {
	rev := &fakeReviewer{review: goodReview()}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: rev, CacheSize: 4, Clock: func() time.Time { return t0 }})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			token := unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix(), "jti": fmt.Sprint(i % 6)})
			for range 20 {
				if _, err := k.Authenticate(bearerContext(token)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := k.cache.len(); n > 4 {
		t.Errorf("cache holds %d entries, bound 4", n)
	}
}

// gatedReviewer holds every review until release is closed.
type gatedReviewer struct {
	fakeReviewer
	started chan struct{}
	release chan struct{}
}

func (g *gatedReviewer) Review(ctx context.Context, token string, audiences []string) (*TokenReview, error) {
	select {
	case g.started <- struct{}{}:
	default:
	}
	<-g.release
	return g.fakeReviewer.Review(ctx, token, audiences)
}

func TestKubeJWTSharesOneReviewAmongConcurrentRequests(t *testing.T) {
	// No exp claim: nothing is cached, so only sharing can save reviews.
	token := unsignedJWT(t, map[string]any{"sub": "x"})
	r := &gatedReviewer{fakeReviewer: fakeReviewer{review: goodReview()}, started: make(chan struct{}, 1), release: make(chan struct{})}
	a := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: r, Clock: func() time.Time { return t0 }})

	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := a.Authenticate(bearerContext(token))
			errs <- err
		}()
	}
	<-r.started
	time.Sleep(50 * time.Millisecond) // let the others join the review in flight
	close(r.release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if calls := r.Calls(); calls >= n {
		t.Fatalf("%d reviews for %d concurrent requests with one token; want them shared", calls, n)
	}
}

func TestKubeJWTWaiterGivesUpWithItsOwnContext(t *testing.T) {
	token := unsignedJWT(t, map[string]any{"sub": "x"})
	r := &gatedReviewer{fakeReviewer: fakeReviewer{review: goodReview()}, started: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(r.release)
	a := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: r, Clock: func() time.Time { return t0 }})
	ctx, cancel := context.WithCancel(bearerContext(token))
	cancel()
	if _, err := a.Authenticate(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error = %v, want %v", err, ErrUnavailable)
	}
}
