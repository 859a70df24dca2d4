package keyfetch

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestJWKSCacheLoopbackHTTP: a RequestAuthentication may not make istiod
// GET its own loopback-only ports over plain http, by jwksUri, by its
// issuer's discovery, or by the jwks_uri an https issuer's discovery
// document names, unless the operator allows it: the key set stays
// RejectAllJWKS, the failure says why, and the loopback port sees no
// connection.
func TestJWKSCacheLoopbackHTTP(t *testing.T) {
	keys := keySetJSON(t, newSigner(t, "a"))
	local, conns := serveOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/openid-configuration" {
			writeBody(w, "application/json", []byte(`{"issuer":"http://`+r.Host+`","jwks_uri":"http://`+r.Host+`/keys"}`))
			return
		}
		writeBody(w, "application/json", keys)
	}))
	tlsIssuer := httptest.NewUnstartedServer(nil)
	tlsIssuer.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeBody(w, "application/json", []byte(`{"issuer":"`+tlsIssuer.URL+`","jwks_uri":"`+local.URL+`/keys"}`))
	})
	tlsIssuer.StartTLS()
	t.Cleanup(tlsIssuer.Close)
	roots := x509.NewCertPool()
	roots.AddCert(tlsIssuer.Certificate())

	for name, src := range map[string]JWKSSource{
		"a jwksUri over http to a loopback port":                        {Issuer: "https://issuer.example", JWKSURI: local.URL + "/keys"},
		"an issuer over http on a loopback port, by discovery":          {Issuer: local.URL},
		"an https issuer whose discovery names http to a loopback port": {Issuer: tlsIssuer.URL},
	} {
		t.Run(name, func(t *testing.T) {
			before := conns.Load()
			c, rec, _ := testClient(t, Config{RootCAs: roots}, nil)
			cache := c.JWKSCache(URLRule{})
			cache.Want([]JWKSSource{src})
			cache.RefreshDue(context.Background())
			if doc, ok := cache.Current().JWKS(src); ok || doc != RejectAllJWKS {
				t.Errorf("key set %q (fetched %t), want RejectAllJWKS", doc, ok)
			}
			if n := rec.Count("fetching a RequestAuthentication key set failed", ErrLoopbackHTTP.Error()); n != 1 {
				t.Errorf("%d failure lines saying %q, want 1", n, ErrLoopbackHTTP)
			}
			if n := conns.Load() - before; n != 0 {
				t.Errorf("%d connections reached the loopback port", n)
			}
			if _, err := c.FetchJWKS(context.Background(), src, URLRule{}); !errors.Is(err, ErrLoopbackHTTP) {
				t.Errorf("FetchJWKS: %v, want ErrLoopbackHTTP", err)
			}

			// The operator's choice allows it.
			allowed := c.JWKSCache(URLRule{LoopbackHTTP: true})
			allowed.Want([]JWKSSource{src})
			allowed.RefreshDue(context.Background())
			if _, ok := allowed.Current().JWKS(src); !ok {
				t.Error("not fetched with LoopbackHTTP")
			}
		})
	}
}
