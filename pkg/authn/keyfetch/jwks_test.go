package keyfetch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// jwksIssuer serves a key set at /keys, and the discovery document naming
// it, from 127.0.0.2; keys and fail can change while it runs.
type jwksIssuer struct {
	URL     string
	keys    atomic.Pointer[[]byte]
	fail    atomic.Bool
	fetches atomic.Int32
}

func newJWKSIssuer(t *testing.T, keys []byte) *jwksIssuer {
	t.Helper()
	iss := &jwksIssuer{}
	iss.keys.Store(&keys)
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeBody(w, "application/json", []byte(`{"issuer":"`+iss.URL+`","jwks_uri":"`+iss.URL+`/keys"}`))
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		iss.fetches.Add(1)
		if iss.fail.Load() {
			http.Error(w, secret, http.StatusServiceUnavailable)
			return
		}
		writeBody(w, "application/json", *iss.keys.Load())
	})
	srv, _ := serveOn(t, "127.0.0.2", mux)
	iss.URL = srv.URL
	return iss
}

func (i *jwksIssuer) set(keys []byte) { i.keys.Store(&keys) }

// kids returns the key IDs of a key set document, in order.
func kids(t *testing.T, doc string) []string {
	t.Helper()
	var set jose.JSONWebKeySet
	if err := json.Unmarshal([]byte(doc), &set); err != nil {
		t.Fatalf("key set %q: %v", doc, err)
	}
	var out []string
	for _, k := range set.Keys {
		if !k.IsPublic() {
			t.Errorf("key %s is not public", k.KeyID)
		}
		out = append(out, k.KeyID)
	}
	return out
}

func TestFetchJWKS(t *testing.T) {
	a, b := newSigner(t, "a"), newSigner(t, "b")
	private := jose.JSONWebKey{Key: b.key, KeyID: "private", Algorithm: string(jose.ES256), Use: "sig"}
	privJSON, err := private.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	mixed := `{"keys":[` + strings.TrimSuffix(strings.TrimPrefix(string(keySetJSON(t, a)), `{"keys":[`), `]}`) +
		`,{"kty":"oct","kid":"hmac","k":"` + secret + `"},` + string(privJSON) + `,{"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"}],"x":"` + secret + `"}`
	iss := newJWKSIssuer(t, []byte(mixed))
	c, _, _ := testClient(t, Config{}, nil)
	for name, src := range map[string]JWKSSource{
		"at the configured jwks_uri":         {Issuer: iss.URL, JWKSURI: iss.URL + "/keys"},
		"at the jwks_uri found by discovery": {Issuer: iss.URL},
	} {
		t.Run(name, func(t *testing.T) {
			doc, err := c.FetchJWKS(context.Background(), src, URLRule{LoopbackHTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := kids(t, doc); len(got) != 1 || got[0] != "a" {
				t.Errorf("kept keys %v, want only the public signing key a", got)
			}
			if strings.Contains(doc, secret) || strings.Contains(doc, `"d"`) {
				t.Errorf("the key set passed on holds more than public keys: %s", doc)
			}
			if err := CheckJWKS(doc); err != nil {
				t.Errorf("the key set passed on is refused by CheckJWKS: %v", err)
			}
		})
	}
	if _, err := c.FetchJWKS(context.Background(), JWKSSource{}, URLRule{}); !errors.Is(err, ErrFetch) {
		t.Errorf("no source: %v, want ErrFetch", err)
	}
}

func TestCheckJWKS(t *testing.T) {
	good := string(keySetJSON(t, newSigner(t, "a")))
	for doc, ok := range map[string]bool{
		good:          true,
		RejectAllJWKS: false,
		`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`: false,
		`not json`: false,
		``:         false,
	} {
		if err := CheckJWKS(doc); (err == nil) != ok {
			t.Errorf("CheckJWKS(%.40q) = %v, want ok %t", doc, err, ok)
		}
	}
}

func TestJWKSCache(t *testing.T) {
	a, b := newSigner(t, "a"), newSigner(t, "b")
	iss := newJWKSIssuer(t, keySetJSON(t, a))
	c, rec, clock := testClient(t, Config{RefreshInterval: time.Hour, RetryInterval: time.Minute}, nil)
	cache := c.JWKSCache(URLRule{LoopbackHTTP: true})
	updates, cancel := cache.Subscribe()
	defer cancel()
	src := JWKSSource{Issuer: iss.URL, JWKSURI: iss.URL + "/keys"}
	ctx := context.Background()

	if doc, ok := cache.Current().JWKS(src); ok || doc != RejectAllJWKS {
		t.Fatalf("before any fetch: %q, %t; want RejectAllJWKS", doc, ok)
	}
	cache.Want([]JWKSSource{src, src})
	cache.RefreshDue(ctx)
	snap := <-updates
	if doc, ok := snap.JWKS(src); !ok || kids(t, doc)[0] != "a" {
		t.Fatalf("after the first fetch: %q, %t", doc, ok)
	}
	v1 := snap.Version

	t.Run("nothing is fetched again before the refresh interval", func(t *testing.T) {
		iss.set(keySetJSON(t, b))
		clock.Advance(59 * time.Minute)
		cache.RefreshDue(ctx)
		if n := iss.fetches.Load(); n != 1 {
			t.Errorf("%d fetches, want 1", n)
		}
	})
	t.Run("a rotated key set is published after the refresh interval", func(t *testing.T) {
		clock.Advance(time.Minute)
		cache.RefreshDue(ctx)
		select {
		case snap := <-updates:
			doc, _ := snap.JWKS(src)
			if got := kids(t, doc); len(got) != 1 || got[0] != "b" || snap.Version <= v1 {
				t.Errorf("after rotation: keys %v, version %d (was %d)", got, snap.Version, v1)
			}
		default:
			t.Fatal("no snapshot published for the rotated keys")
		}
	})
	t.Run("an unchanged key set publishes nothing", func(t *testing.T) {
		clock.Advance(time.Hour)
		cache.RefreshDue(ctx)
		select {
		case snap := <-updates:
			t.Errorf("published version %d for unchanged keys", snap.Version)
		default:
		}
	})
	t.Run("a failed refresh keeps the keys held, and is retried at the retry interval", func(t *testing.T) {
		iss.fail.Store(true)
		clock.Advance(time.Hour)
		cache.RefreshDue(ctx)
		if doc, ok := cache.Current().JWKS(src); !ok || kids(t, doc)[0] != "b" {
			t.Errorf("after a failed refresh: %q, %t", doc, ok)
		}
		if rec.Count("fetching a RequestAuthentication key set failed", "the keys fetched before are kept") != 1 {
			t.Error("the failed refresh is not logged once")
		}
		if rec.Count(secret[:16]) != 0 {
			t.Error("a log line holds what the issuer answered")
		}
		before := iss.fetches.Load()
		clock.Advance(time.Minute)
		cache.RefreshDue(ctx)
		if iss.fetches.Load() != before+1 {
			t.Error("a failed key set is not retried after the retry interval")
		}
		iss.fail.Store(false)
	})
	t.Run("a key set no longer wanted leaves the snapshot", func(t *testing.T) {
		cache.Want(nil)
		if doc, ok := cache.Current().JWKS(src); ok || doc != RejectAllJWKS {
			t.Errorf("after Want(nil): %q, %t", doc, ok)
		}
	})
}

// TestJWKSCacheRun checks that Run fetches a newly wanted key set at once.
func TestJWKSCacheRun(t *testing.T) {
	iss := newJWKSIssuer(t, keySetJSON(t, newSigner(t, "a")))
	c, _, _ := testClient(t, Config{}, nil)
	cache := c.JWKSCache(URLRule{LoopbackHTTP: true})
	updates, cancel := cache.Subscribe()
	defer cancel()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- cache.Run(ctx) }()
	cache.Want([]JWKSSource{{Issuer: iss.URL}})
	select {
	case snap := <-updates:
		if _, ok := snap.JWKS(JWKSSource{Issuer: iss.URL}); !ok {
			t.Error("published snapshot without the key set")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no key set fetched")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHostileIssuerRequestAuthentication runs the hostile issuers against
// RequestAuthentication's key sets: each leaves RejectAllJWKS in place,
// reaches no refused address and logs nothing of what it served.
func TestHostileIssuerRequestAuthentication(t *testing.T) {
	for name, tc := range hostileCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			standIn := newMetadataStandIn(t, nil)
			issURL, jwksURI := serveHostile(t, tc, standIn)
			c, rec, _ := testClient(t, Config{Timeout: tc.timeout}, standIn)
			cache := c.JWKSCache(URLRule{LoopbackHTTP: true})
			src := JWKSSource{Issuer: issURL, JWKSURI: jwksURI}
			cache.Want([]JWKSSource{src})
			cache.RefreshDue(context.Background())

			if doc, ok := cache.Current().JWKS(src); ok || doc != RejectAllJWKS {
				t.Errorf("key set %q (fetched %t), want RejectAllJWKS", doc, ok)
			}
			if n := rec.Count("fetching a RequestAuthentication key set failed", "no keys held"); n != 1 {
				t.Errorf("%d failure lines logged, want 1", n)
			}
			if n := rec.Count(tc.wantText); tc.wantText != "" && n != 1 {
				t.Errorf("no log line says %q", tc.wantText)
			}
			if n := rec.Count(secret[:16]); n != 0 {
				t.Errorf("%d log lines hold the fetched secret", n)
			}
			if n := standIn.conns.Load(); n != 0 {
				t.Errorf("%d connections reached the refused address", n)
			}
		})
	}
}
