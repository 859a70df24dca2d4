package authn

import (
	"context"
	"crypto"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/golang-jwt/jwt/v5"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// countingKeys counts the signature checks of a key set.
type countingKeys struct {
	oidc.KeySet
	checks atomic.Int32
}

func (k *countingKeys) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	k.checks.Add(1)
	return k.KeySet.VerifySignature(ctx, jwt)
}

func TestOIDCRemembersVerifiedTokens(t *testing.T) {
	const cacheIssuer = "https://issuer.example"
	token := func(exp time.Time) string {
		return sign(t, jwt.SigningMethodRS256, sharedRSAKey, "rsa", jwt.MapClaims{
			"iss": cacheIssuer, "sub": "system:serviceaccount:default:httpbin", "aud": "istio-ca",
			"exp": exp.Unix(),
			"kubernetes.io": map[string]any{
				"namespace": "default", "pod": map[string]string{"name": "p", "uid": "u"},
			},
		})
	}
	forged := sign(t, jwt.SigningMethodRS256, otherRSAKey, "rsa", jwt.MapClaims{
		"iss": cacheIssuer, "sub": "system:serviceaccount:default:httpbin", "aud": "istio-ca", "exp": t0.Add(time.Hour).Unix(),
	})
	tests := map[string]struct {
		token string
		// between runs after the first Authenticate; then Authenticate runs again.
		between    func(o *OIDC, now *time.Time)
		wantChecks int32
		wantSecond bool // the second Authenticate succeeds
	}{
		"a token seen before is recognised without a signature check": {
			token: token(t0.Add(time.Hour)), between: func(*OIDC, *time.Time) {}, wantChecks: 1, wantSecond: true,
		},
		"a token is checked again after a minute": {
			token:   token(t0.Add(time.Hour)),
			between: func(_ *OIDC, now *time.Time) { *now = now.Add(DefaultOIDCCacheTTL) }, wantChecks: 2, wantSecond: true,
		},
		"a token is never recognised past its exp": {
			token:   token(t0.Add(30 * time.Second)),
			between: func(_ *OIDC, now *time.Time) { *now = now.Add(31 * time.Second) }, wantChecks: 2,
		},
		"a change of key set forgets every token": {
			token: token(t0.Add(time.Hour)), between: func(o *OIDC, _ *time.Time) { o.tokens.clear() }, wantChecks: 2, wantSecond: true,
		},
		"a refused token is checked every time": {
			token: forged, between: func(*OIDC, *time.Time) {}, wantChecks: 2,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			now := t0
			keys := &countingKeys{KeySet: &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{&sharedRSAKey.PublicKey}}}
			o := newOIDC(OIDCConfig{
				TrustDomain: testTD, Rule: JWTRule{Issuer: cacheIssuer, Audiences: []string{"istio-ca"}},
				Clock: func() time.Time { return now },
			}, keys)
			first, firstErr := o.Authenticate(bearerContext(tc.token))
			if first != nil {
				first.Identities[0] = spiffeid.RequireFromString("spiffe://evil.example/ns/x/sa/y")
				first.Pod.Name = "changed"
			}
			tc.between(o, &now)
			second, err := o.Authenticate(bearerContext(tc.token))
			if got := keys.checks.Load(); got != tc.wantChecks {
				t.Errorf("%d signature checks, want %d", got, tc.wantChecks)
			}
			if (err == nil) != tc.wantSecond {
				t.Fatalf("second Authenticate: %v (first: %v); want success: %t", err, firstErr, tc.wantSecond)
			}
			if err == nil && (second.Identities[0].String() != workloadID || second.Pod == nil || second.Pod.Name != "p") {
				t.Errorf("second caller = %+v; a change to the first leaked into it", second)
			}
		})
	}
}

func TestVerifiedTokensDropAResultFromBeforeAClear(t *testing.T) {
	v := newVerifiedTokens(8, time.Minute)
	key := [32]byte{1}
	gen := v.generation()
	v.clear() // the key set changed while the token was being verified
	v.put(key, &Caller{Authenticator: KindOIDC}, gen, t0, t0.Add(time.Hour))
	if _, ok := v.get(key, t0); ok {
		t.Fatal("a verification begun before a clear was remembered")
	}
	v.put(key, &Caller{Authenticator: KindOIDC}, v.generation(), t0, t0.Add(time.Hour))
	if _, ok := v.get(key, t0); !ok {
		t.Fatal("a verification after the clear was not remembered")
	}
}

// TestOIDCForgetsTokensWhenKeysAreFetched: a token remembered under keys
// the issuer has since rotated out is refused once the new keys are
// fetched, though it would still be remembered for most of a minute.
func TestOIDCForgetsTokensWhenKeysAreFetched(t *testing.T) {
	iss := newIssuer(t)
	fetch := iss.fetch()
	fetch.RefreshInterval = 10 * time.Second
	now := t0
	o := NewOIDC(OIDCConfig{TrustDomain: testTD, Rule: iss.rule(true), Fetch: fetch, Clock: func() time.Time { return now }})
	claims := func() jwt.MapClaims {
		return jwt.MapClaims{"iss": iss.srv.URL, "sub": "system:serviceaccount:default:httpbin", "aud": "mesh", "exp": t0.Add(time.Hour).Unix()}
	}
	old := sign(t, jwt.SigningMethodRS256, iss.rsaKey, "rsa", claims())
	if _, err := o.Authenticate(bearerContext(old)); err != nil {
		t.Fatal(err)
	}
	iss.rotated.Store(true)
	now = now.Add(11 * time.Second) // the keys are stale; the token is remembered
	if _, err := o.Authenticate(bearerContext(old)); err != nil {
		t.Fatalf("a remembered token was refused before any fetch: %v", err)
	}
	if _, err := o.Authenticate(bearerContext(sign(t, jwt.SigningMethodRS256, otherRSAKey, "rsa2", claims()))); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	if iss.keyFetches.Load() != 2 {
		t.Fatalf("%d key fetches, want 2", iss.keyFetches.Load())
	}
	if _, err := o.Authenticate(bearerContext(old)); err == nil {
		t.Fatal("a token of a key rotated out is still accepted after the new keys were fetched")
	}
}
