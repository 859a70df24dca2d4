package keyfetch

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// keyServer publishes a key set that tests change, counting fetches; while
// hold is set, each fetch waits for it to be closed.
type keyServer struct {
	mu      sync.Mutex
	body    []byte
	hold    chan struct{}
	fetches atomic.Int32
	arrived chan struct{} // gets a value per fetch
}

func newKeyServer(t *testing.T, signers ...signer) (*keyServer, string) {
	t.Helper()
	ks := &keyServer{body: keySetJSON(t, signers...), arrived: make(chan struct{}, 100)}
	srv, _ := serveOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.fetches.Add(1)
		ks.arrived <- struct{}{}
		ks.mu.Lock()
		body, hold := ks.body, ks.hold
		ks.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		writeBody(w, "application/jwk-set+json", body)
	}))
	return ks, srv.URL + "/keys"
}

// newTestKeySet is the key set of an issuer publishing signers, with the
// server that publishes them and the clock the client tells time by.
func newTestKeySet(t *testing.T, signers ...signer) (*KeySet, *keyServer, *catest.Clock) {
	t.Helper()
	srv, uri := newKeyServer(t, signers...)
	client, _, clock := testClient(t, Config{}, nil)
	return client.KeySet("https://issuer.example", uri, algs), srv, clock
}

func (ks *keyServer) publish(t *testing.T, signers ...signer) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.body = keySetJSON(t, signers...)
}

func (ks *keyServer) holdFetches() chan struct{} {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.hold = make(chan struct{})
	return ks.hold
}

func TestUnknownKeysRefreshAtMostOncePerInterval(t *testing.T) {
	a, b, c := newSigner(t, "a"), newSigner(t, "b"), newSigner(t, "c")
	set, srv, clock := newTestKeySet(t, a)
	ctx := context.Background()
	verify := func(s signer, kid string) error {
		s.kid = kid
		_, err := set.VerifySignature(ctx, s.token(t, `{"sub":"x"}`))
		return err
	}
	wantFetches := func(want int32) {
		t.Helper()
		if n := srv.fetches.Load(); n != want {
			t.Fatalf("%d fetches, want %d", n, want)
		}
	}

	if err := verify(a, "a"); err != nil {
		t.Fatal(err)
	}
	wantFetches(1)
	for i := range 100 {
		if err := verify(b, "b"); !errors.Is(err, ErrNoMatchingKey) {
			t.Fatalf("token %d with an unknown kid: error = %v, want %v", i, err, ErrNoMatchingKey)
		}
		if err := verify(c, "a"); !errors.Is(err, ErrNoMatchingKey) {
			t.Fatalf("token %d with a bad signature: error = %v, want %v", i, err, ErrNoMatchingKey)
		}
		if err := verify(c, ""); !errors.Is(err, ErrNoMatchingKey) {
			t.Fatalf("token %d without kid: error = %v, want %v", i, err, ErrNoMatchingKey)
		}
	}
	wantFetches(1)

	// The issuer rotates to b; istiod learns of it at the next interval.
	srv.publish(t, b)
	clock.Advance(DefaultRefreshInterval - 1)
	if err := verify(b, "b"); !errors.Is(err, ErrNoMatchingKey) {
		t.Fatalf("before the interval: error = %v, want %v", err, ErrNoMatchingKey)
	}
	if err := verify(a, "a"); err != nil {
		t.Fatalf("a key held is used until the refresh: %v", err)
	}
	wantFetches(1)
	clock.Advance(1)
	if err := verify(b, "b"); err != nil {
		t.Fatalf("after the interval: %v", err)
	}
	wantFetches(2)
	if err := verify(a, "a"); !errors.Is(err, ErrNoMatchingKey) {
		t.Fatalf("a key the issuer dropped: error = %v, want %v", err, ErrNoMatchingKey)
	}
	for range 100 {
		_ = verify(c, "c")
	}
	wantFetches(2)
}

func TestKeysOlderThanTheIntervalAreRefreshed(t *testing.T) {
	a, b := newSigner(t, "a"), newSigner(t, "b")
	set, srv, clock := newTestKeySet(t, a)
	token := a.token(t, `{}`)
	if _, err := set.VerifySignature(context.Background(), token); err != nil {
		t.Fatal(err)
	}
	// The issuer drops a, say because it leaked.
	srv.publish(t, b)
	clock.Advance(DefaultRefreshInterval)
	if _, err := set.VerifySignature(context.Background(), token); !errors.Is(err, ErrNoMatchingKey) {
		t.Fatalf("error = %v, want %v", err, ErrNoMatchingKey)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

func TestConcurrentMissesShareOneFetch(t *testing.T) {
	a := newSigner(t, "a")
	set, srv, _ := newTestKeySet(t, a)
	release := srv.holdFetches()
	token := a.token(t, `{}`)

	const callers = 32
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, err := set.VerifySignature(context.Background(), token)
			errs <- err
		}()
	}
	<-srv.arrived
	close(release)
	for range callers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for %d concurrent callers, want 1", n, callers)
	}
}

func TestACallerWaitingForAFetchCanGiveUp(t *testing.T) {
	a := newSigner(t, "a")
	set, srv, _ := newTestKeySet(t, a)
	release := srv.holdFetches()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := set.VerifySignature(ctx, a.token(t, `{}`))
		errs <- err
	}()
	<-srv.arrived
	cancel()
	if err := <-errs; !errors.Is(err, ErrNoKeys) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want %v and %v", err, ErrNoKeys, context.Canceled)
	}
	// The fetch goes on for the callers that wait.
	close(release)
	if _, err := set.VerifySignature(context.Background(), a.token(t, `{}`)); err != nil {
		t.Fatal(err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
}

func TestWithoutKeysNothingIsAcceptedAndFetchesAreRetriedSparingly(t *testing.T) {
	a := newSigner(t, "a")
	set, srv, clock := newTestKeySet(t) // an empty key set
	token := a.token(t, `{}`)
	for range 50 {
		if _, err := set.VerifySignature(context.Background(), token); !errors.Is(err, ErrNoKeys) {
			t.Fatalf("error = %v, want %v", err, ErrNoKeys)
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1 until the retry interval", n)
	}
	srv.publish(t, a)
	clock.Advance(DefaultRetryInterval)
	if _, err := set.VerifySignature(context.Background(), token); err != nil {
		t.Fatal(err)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

func TestMalformedTokensFetchNothing(t *testing.T) {
	a := newSigner(t, "a")
	srv, uri := newKeyServer(t, a)
	client, _, _ := testClient(t, Config{}, nil)
	set := client.KeySet("https://issuer.example", uri, []string{"RS256"})
	for name, token := range map[string]string{
		"garbage":                        "not.a.jwt",
		"a token by a refused algorithm": a.token(t, `{}`),
		"an unsigned token":              "eyJhbGciOiJub25lIn0.e30.",
	} {
		if _, err := set.VerifySignature(context.Background(), token); !errors.Is(err, ErrMalformedToken) {
			t.Errorf("%s: error = %v, want %v", name, err, ErrMalformedToken)
		}
	}
	if n := srv.fetches.Load(); n != 0 {
		t.Fatalf("%d fetches, want 0", n)
	}
}

func TestAllowListedAddressesCanBeReached(t *testing.T) {
	a := newSigner(t, "a")
	standIn := newMetadataStandIn(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeBody(w, "application/json", keySetJSON(t, a))
	}))
	for name, tc := range map[string]struct {
		allowed []netip.Prefix
		want    error
	}{
		"a refused address is refused":               {want: ErrRefusedAddress},
		"an allow-listed refused address is reached": {allowed: standIn.prefixes},
	} {
		t.Run(name, func(t *testing.T) {
			client, _, _ := testClient(t, Config{AllowedPrefixes: tc.allowed}, standIn)
			_, err := client.KeySet("https://issuer.example", standIn.URL+"/keys", algs).VerifySignature(context.Background(), a.token(t, `{}`))
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRedirectsWithinTheIssuerAreFollowed(t *testing.T) {
	a := newSigner(t, "a")
	mux := http.NewServeMux()
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v2/keys", http.StatusFound)
	})
	mux.HandleFunc("/v2/keys", func(w http.ResponseWriter, _ *http.Request) {
		writeBody(w, "application/json; charset=utf-8", keySetJSON(t, a))
	})
	srv, _ := serveOn(t, "127.0.0.2", mux)
	client, _, _ := testClient(t, Config{}, nil)
	if _, err := client.KeySet(srv.URL, srv.URL+"/keys", algs).VerifySignature(context.Background(), a.token(t, `{}`)); err != nil {
		t.Fatal(err)
	}
}

func TestACallerLateForAFetchGetsItsKeys(t *testing.T) {
	a := newSigner(t, "a")
	set, srv, _ := newTestKeySet(t, a)
	if _, err := set.VerifySignature(context.Background(), a.token(t, `{}`)); err != nil {
		t.Fatal(err)
	}
	// A caller that found no keys just before that fetch ended asks for a
	// refresh: it is not refetched, and it gets the keys.
	keys, err := set.refresh(context.Background())
	if len(keys) != 1 || err == nil {
		t.Fatalf("refresh() = %d keys, %v; want the key held and why it was not refetched", len(keys), err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
}
