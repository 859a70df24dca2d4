package authn

import (
	"context"
	"crypto"
	"errors"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/golang-jwt/jwt/v5"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

const fuzzIssuer = "https://issuer.example"

// FuzzJWT feeds arbitrary tokens to the token parsers. Seeds are in
// testdata/fuzz/FuzzJWT.
func FuzzJWT(f *testing.F) {
	valid := sign(f, jwt.SigningMethodRS256, sharedRSAKey, "rsa", jwt.MapClaims{
		"iss": fuzzIssuer, "sub": "system:serviceaccount:default:httpbin", "aud": []string{"x", "istio-ca"},
		"exp": t0.Add(time.Hour).Unix(),
		"kubernetes.io": map[string]any{
			"namespace": "default", "pod": map[string]string{"name": "p", "uid": "u"},
		},
	})
	f.Add(valid)

	rule := JWTRule{Issuer: fuzzIssuer, Audiences: []string{"istio-ca"}}
	clock := func() time.Time { return t0 }
	keys := &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{&sharedRSAKey.PublicKey}}
	signed := newOIDC(OIDCConfig{TrustDomain: testTD, Rule: rule, Clock: clock}, keys)
	// unchecked skips the signature so that the fuzzer reaches the claim
	// checks that follow it.
	unchecked := newOIDC(OIDCConfig{TrustDomain: testTD, Rule: rule, Clock: clock}, keys)
	unchecked.verifyCfg = &oidc.Config{
		SupportedSigningAlgs:       signingAlgs,
		SkipClientIDCheck:          true,
		InsecureSkipSignatureCheck: true,
		Now:                        clock,
	}
	kube := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: &fakeReviewer{review: goodReview()}, CacheSize: 64, Clock: clock})

	f.Fuzz(func(t *testing.T, token string) {
		ctx := context.Background()
		for _, o := range []*OIDC{signed, unchecked} {
			caller, err := o.verify(ctx, token)
			checkFuzzResult(t, token, caller, err)
		}
		res, err := kube.authenticateToken(ctx, "", kube.cfg.Reviewer, token)
		if err == nil {
			checkFuzzResult(t, token, &Caller{Identities: []spiffeid.ID{res.id}}, nil)
		} else if len(token) <= MaxTokenSize {
			t.Fatalf("kube review refused an accepted token: %v", err)
		}
		unverifiedExpiry(token)
		if _, err := BearerToken(bearerContext(token)); err != nil && !errors.Is(err, ErrMalformedMetadata) && !errors.Is(err, ErrTokenTooLarge) && !errors.Is(err, ErrNoCredentials) {
			t.Fatalf("BearerToken() error of unknown kind: %v", err)
		}
	})
}

// checkFuzzResult insists that an accepted token yields one well-formed
// identity in our trust domain, and that oversized tokens are refused.
func checkFuzzResult(t *testing.T, token string, caller *Caller, err error) {
	t.Helper()
	if len(token) > MaxTokenSize && !errors.Is(err, ErrTokenTooLarge) {
		t.Fatalf("oversized token: error = %v, want %v", err, ErrTokenTooLarge)
	}
	if err != nil {
		if caller != nil {
			t.Fatalf("caller %+v returned with error %v", caller, err)
		}
		return
	}
	if len(caller.Identities) != 1 {
		t.Fatalf("accepted with identities %v", caller.Identities)
	}
	if err := checkWorkloadID(testTD, caller.Identities[0]); err != nil {
		t.Fatalf("accepted identity %s: %v", caller.Identities[0], err)
	}
}
