package authn

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

func TestOIDC(t *testing.T) {
	iss := newIssuer(t)
	pubDER, err := x509.MarshalPKIXPublicKey(&iss.rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})

	// claims returns valid claims for default/httpbin, edited by edit.
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{
			"iss": iss.srv.URL,
			"sub": "system:serviceaccount:default:httpbin",
			"aud": "istio-ca",
			"iat": t0.Add(-time.Minute).Unix(),
			"exp": t0.Add(time.Hour).Unix(),
		}
		if edit != nil {
			edit(c)
		}
		return c
	}
	rsaToken := func(edit func(jwt.MapClaims)) string {
		return sign(t, jwt.SigningMethodRS256, iss.rsaKey, "rsa", claims(edit))
	}

	tests := map[string]struct {
		token   string
		wantErr error
		wantID  string
		wantPod *Pod
	}{
		"an RS256 token is accepted": {
			token:  rsaToken(nil),
			wantID: workloadID,
		},
		"an ES256 token is accepted": {
			token:  sign(t, jwt.SigningMethodES256, iss.ecKey, "ec", claims(nil)),
			wantID: workloadID,
		},
		"a PS256 token is accepted": {
			token:  sign(t, jwt.SigningMethodPS256, iss.rsaKey, "rsa", claims(nil)),
			wantID: workloadID,
		},
		"an aud array with one accepted value is accepted": {
			token:  rsaToken(func(c jwt.MapClaims) { c["aud"] = []string{"https://kubernetes.default.svc", "mesh"} }),
			wantID: workloadID,
		},
		"the identity is built from sub in our trust domain, whatever else the token says": {
			token: rsaToken(func(c jwt.MapClaims) {
				c["sub"] = "system:serviceaccount:payments:api"
				c["trust_domain"] = "evil.example"
			}),
			wantID: "spiffe://cluster.local/ns/payments/sa/api",
		},
		"the pod of a Kubernetes-issued token is recorded": {
			token: rsaToken(func(c jwt.MapClaims) {
				c["kubernetes.io"] = map[string]any{
					"namespace":      "default",
					"serviceaccount": map[string]string{"name": "httpbin", "uid": "sa-uid"},
					"pod":            map[string]string{"name": "httpbin-7d9c", "uid": "pod-uid"},
				}
			}),
			wantID:  workloadID,
			wantPod: &Pod{Name: "httpbin-7d9c", UID: "pod-uid"},
		},
		"kubernetes.io claims naming another namespace are refused": {
			token: rsaToken(func(c jwt.MapClaims) {
				c["kubernetes.io"] = map[string]any{"namespace": "kube-system"}
			}),
			wantErr: ErrInvalidIdentity,
		},
		"kubernetes.io claims naming another service account are refused": {
			token: rsaToken(func(c jwt.MapClaims) {
				c["kubernetes.io"] = map[string]any{"serviceaccount": map[string]string{"name": "admin"}}
			}),
			wantErr: ErrInvalidIdentity,
		},
		"malformed kubernetes.io claims are refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["kubernetes.io"] = "default" }),
			wantErr: ErrInvalidToken,
		},
		"an expired token is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["exp"] = t0.Add(-time.Second).Unix() }),
			wantErr: ErrInvalidToken,
		},
		"a token not yet valid is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["nbf"] = t0.Add(time.Hour).Unix() }),
			wantErr: ErrInvalidToken,
		},
		"a token without exp is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { delete(c, "exp") }),
			wantErr: ErrInvalidToken,
		},
		"a token for another audience is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["aud"] = "https://kubernetes.default.svc" }),
			wantErr: ErrInvalidToken,
		},
		"an aud array with no accepted value is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["aud"] = []string{"a", "b"} }),
			wantErr: ErrInvalidToken,
		},
		"a token without aud is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { delete(c, "aud") }),
			wantErr: ErrInvalidToken,
		},
		"a token from another issuer is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }),
			wantErr: ErrInvalidToken,
		},
		"an unsigned alg:none token is refused": {
			token:   sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "rsa", claims(nil)),
			wantErr: ErrInvalidToken,
		},
		"an HS256 token keyed with the issuer's RSA public key is refused": {
			token:   sign(t, jwt.SigningMethodHS256, pubPEM, "rsa", claims(nil)),
			wantErr: ErrInvalidToken,
		},
		"an HS256 token keyed with the public key's DER is refused": {
			token:   sign(t, jwt.SigningMethodHS256, pubDER, "rsa", claims(nil)),
			wantErr: ErrInvalidToken,
		},
		"a token signed by a key the issuer does not publish is refused": {
			token:   sign(t, jwt.SigningMethodRS256, otherRSAKey, "unknown", claims(nil)),
			wantErr: ErrInvalidToken,
		},
		"a token signed by another key under a published kid is refused": {
			token:   sign(t, jwt.SigningMethodRS256, otherRSAKey, "rsa", claims(nil)),
			wantErr: ErrInvalidToken,
		},
		"a token with its payload swapped is refused": {
			token: func() string {
				good := strings.Split(rsaToken(nil), ".")
				evil := strings.Split(rsaToken(func(c jwt.MapClaims) { c["sub"] = "system:serviceaccount:kube-system:admin" }), ".")
				return good[0] + "." + evil[1] + "." + good[2]
			}(),
			wantErr: ErrInvalidToken,
		},
		"a sub with three parts is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["sub"] = "system:serviceaccount:default" }),
			wantErr: ErrInvalidIdentity,
		},
		"a sub with five parts is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["sub"] = "system:serviceaccount:default:httpbin:extra" }),
			wantErr: ErrInvalidIdentity,
		},
		"a sub that is not a service account is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["sub"] = "alice@example.com" }),
			wantErr: ErrInvalidIdentity,
		},
		"a sub with characters outside SPIFFE paths is refused": {
			token:   rsaToken(func(c jwt.MapClaims) { c["sub"] = "system:serviceaccount:default:http/bin" }),
			wantErr: ErrInvalidIdentity,
		},
		"a token of 100,000 dots is refused by size": {
			token:   strings.Repeat(".", 100_000),
			wantErr: ErrTokenTooLarge,
		},
		"garbage is refused": {
			token:   "not-a-jwt",
			wantErr: ErrInvalidToken,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewOIDC(OIDCConfig{
				TrustDomain: testTD,
				Rule:        iss.rule(true),
				Fetch:       iss.fetch(),
				Clock:       func() time.Time { return t0 },
			})
			caller, err := o.Authenticate(bearerContext(tc.token, "clusterid", "west"))
			checkCaller(t, caller, err, wantCaller{err: tc.wantErr, id: tc.wantID, kind: KindOIDC, clusterID: "", pod: tc.wantPod})
		})
	}
}

func TestOIDCSizeCapComesFirst(t *testing.T) {
	// No server: a token over the cap must be refused without any I/O.
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: JWTRule{Issuer: "https://127.0.0.1:1", Audiences: []string{"istio-ca"}}})
	_, err := o.verify(context.Background(), strings.Repeat(".", 100_000))
	if !errors.Is(err, ErrTokenTooLarge) {
		t.Fatalf("error = %v, want %v", err, ErrTokenTooLarge)
	}
	md := bearerContext(strings.Repeat(".", 100_000))
	if _, err := o.Authenticate(md); !errors.Is(err, ErrTokenTooLarge) {
		t.Fatalf("Authenticate() error = %v, want %v", err, ErrTokenTooLarge)
	}
}

func TestOIDCDiscovery(t *testing.T) {
	iss := newIssuer(t)
	iss.failDiscovery.Store(1)
	clock := catest.NewClock(t0)
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: iss.rule(false), Fetch: iss.fetch(), Clock: clock.Now})
	if n := iss.discoveries.Load() + iss.keyFetches.Load(); n != 0 {
		t.Fatalf("NewOIDC made %d requests, want none", n)
	}
	token := sign(t, jwt.SigningMethodES256, iss.ecKey, "ec", jwt.MapClaims{
		"iss": iss.srv.URL, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix(),
	})
	if _, err := o.Authenticate(bearerContext(token)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("while discovery fails: error = %v, want %v", err, ErrUnavailable)
	}
	if _, err := o.Authenticate(bearerContext(token)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("before the retry interval: error = %v, want %v", err, ErrUnavailable)
	}
	clock.Advance(keyfetch.DefaultRetryInterval)
	caller, err := o.Authenticate(bearerContext(token))
	if err != nil {
		t.Fatalf("after discovery recovers: %v", err)
	}
	if caller.Identities[0].String() != workloadID {
		t.Errorf("Identities = %v", caller.Identities)
	}
	if _, err := o.Authenticate(bearerContext(token)); err != nil {
		t.Fatal(err)
	}
	if n := iss.discoveries.Load(); n != 2 {
		t.Errorf("discovery requests = %d, want 2 (one failed, none until the retry interval, one kept)", n)
	}
}

func TestOIDCDiscoveryOfAnotherIssuerFails(t *testing.T) {
	iss := newIssuer(t)
	rule := iss.rule(false)
	rule.Issuer = iss.srv.URL + "/"
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: rule, Fetch: iss.fetch(), Clock: func() time.Time { return t0 }})
	token := sign(t, jwt.SigningMethodRS256, iss.rsaKey, "rsa", jwt.MapClaims{
		"iss": rule.Issuer, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix(),
	})
	if _, err := o.Authenticate(bearerContext(token)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error = %v, want %v", err, ErrUnavailable)
	}
}

func TestOIDCFailsClosedWhenKeysAreUnreachable(t *testing.T) {
	tests := map[string]bool{
		"a JWKS URI that cannot be reached fails closed":   true,
		"an issuer that cannot be discovered fails closed": false,
	}
	for name, withJWKSURI := range tests {
		t.Run(name, func(t *testing.T) {
			iss := newIssuer(t)
			rule := iss.rule(withJWKSURI)
			fetch := iss.fetch()
			token := sign(t, jwt.SigningMethodRS256, iss.rsaKey, "rsa", jwt.MapClaims{
				"iss": iss.srv.URL, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix(),
			})
			iss.srv.Close()
			o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: rule, Fetch: fetch, Clock: func() time.Time { return t0 }})
			if _, err := o.Authenticate(bearerContext(token)); err == nil {
				t.Fatal("Authenticate() succeeded without keys")
			}
		})
	}
}

func TestOIDCDoesNotTrustUnknownServers(t *testing.T) {
	iss := newIssuer(t)
	// The default roots do not include the test server's certificate.
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: iss.rule(true), Clock: func() time.Time { return t0 }})
	token := sign(t, jwt.SigningMethodRS256, iss.rsaKey, "rsa", jwt.MapClaims{
		"iss": iss.srv.URL, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix(),
	})
	if _, err := o.Authenticate(bearerContext(token)); err == nil {
		t.Fatal("Authenticate() succeeded with keys from an untrusted server")
	}
}

func TestOIDCWithInvalidRuleRefusesEverything(t *testing.T) {
	iss := newIssuer(t)
	rule := iss.rule(true)
	rule.Audiences = nil
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: rule, Fetch: iss.fetch(), Clock: func() time.Time { return t0 }})
	token := sign(t, jwt.SigningMethodRS256, iss.rsaKey, "rsa", jwt.MapClaims{
		"iss": iss.srv.URL, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix(),
	})
	if _, err := o.Authenticate(bearerContext(token)); !errors.Is(err, ErrInvalidJWTRule) {
		t.Fatalf("error = %v, want %v", err, ErrInvalidJWTRule)
	}
}

func TestOIDCWithoutBearerTokenHasNoCredentials(t *testing.T) {
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: JWTRule{Issuer: "https://issuer.example", Audiences: []string{"a"}}})
	if _, err := o.Authenticate(context.Background()); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("error = %v, want %v", err, ErrNoCredentials)
	}
}

func TestOIDCDiscoversOnceUnderConcurrentFirstUse(t *testing.T) {
	iss := newIssuer(t)
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: iss.rule(false), Fetch: iss.fetch(), Clock: func() time.Time { return t0 }})
	token := sign(t, jwt.SigningMethodRS256, iss.rsaKey, "rsa", jwt.MapClaims{
		"iss": iss.srv.URL, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix(),
	})
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			_, err := o.Authenticate(bearerContext(token))
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := iss.discoveries.Load(); n != 1 {
		t.Errorf("discovery requests = %d, want 1", n)
	}
}

func TestOIDCRefusesAJWKSURIThatPointsAtTheMetadataService(t *testing.T) {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux) // plain http on loopback, as the rule allows
	t.Cleanup(srv.Close)
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"issuer": srv.URL, "jwks_uri": "http://169.254.169.254/latest/meta-data/iam/security-credentials/"})
	})
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: JWTRule{Issuer: srv.URL, Audiences: []string{"mesh"}}, Clock: func() time.Time { return t0 }})
	token := sign(t, jwt.SigningMethodRS256, sharedRSAKey, "rsa", jwt.MapClaims{
		"iss": srv.URL, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix(),
	})
	_, err := o.Authenticate(bearerContext(token))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, keyfetch.ErrRefusedURL) {
		t.Fatalf("error = %v, want %v and %v", err, ErrUnavailable, keyfetch.ErrRefusedURL)
	}
}
