package authn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
)

// issuer is an OIDC provider served over TLS by httptest: discovery at
// /.well-known/openid-configuration, keys at /keys.
type issuer struct {
	srv    *httptest.Server
	rsaKey *rsa.PrivateKey
	ecKey  *ecdsa.PrivateKey
	// failDiscovery makes discovery answer 500 while it is above zero,
	// counting down.
	failDiscovery atomic.Int32
	discoveries   atomic.Int32
	keyFetches    atomic.Int32
	// rotated makes the key set hold otherRSAKey, as "rsa2", instead of
	// rsaKey.
	rotated atomic.Bool
}

var (
	sharedRSAKey = func() *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return k
	}()
	otherRSAKey = func() *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return k
	}()
)

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	iss := &issuer{rsaKey: sharedRSAKey, ecKey: ecKey}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		iss.discoveries.Add(1)
		if iss.failDiscovery.Load() > 0 {
			iss.failDiscovery.Add(-1)
			http.Error(w, "unavailable", http.StatusInternalServerError)
			return
		}
		writeJSON(w, map[string]any{
			"issuer":                                iss.srv.URL,
			"jwks_uri":                              iss.srv.URL + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256", "PS256"},
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		iss.keyFetches.Add(1)
		rsaKey := rsaJWK("rsa", &iss.rsaKey.PublicKey)
		if iss.rotated.Load() {
			rsaKey = rsaJWK("rsa2", &otherRSAKey.PublicKey)
		}
		writeJSON(w, map[string]any{"keys": []any{rsaKey, ecJWK(t, "ec", &iss.ecKey.PublicKey)}})
	})
	iss.srv = httptest.NewTLSServer(mux)
	t.Cleanup(iss.srv.Close)
	return iss
}

func (iss *issuer) rule(withJWKSURI bool) JWTRule {
	r := JWTRule{Issuer: iss.srv.URL, Audiences: []string{"istio-ca", "mesh"}}
	if withJWKSURI {
		r.JWKSURI = iss.srv.URL + "/keys"
	}
	return r
}

// fetch configures key fetching to trust the issuer's certificate.
func (iss *issuer) fetch() keyfetch.Config {
	roots := x509.NewCertPool()
	roots.AddCert(iss.srv.Certificate())
	return keyfetch.Config{RootCAs: roots}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, pub *rsa.PublicKey) map[string]string {
	return map[string]string{
		"kty": "RSA", "use": "sig", "kid": kid,
		"n": b64(pub.N.Bytes()),
		"e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}
}

func ecJWK(t *testing.T, kid string, pub *ecdsa.PublicKey) map[string]string {
	t.Helper()
	ek, err := pub.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	raw := ek.Bytes() // 0x04 || X || Y
	n := (len(raw) - 1) / 2
	return map[string]string{
		"kty": "EC", "use": "sig", "kid": kid, "crv": "P-256",
		"x": b64(raw[1 : 1+n]),
		"y": b64(raw[1+n:]),
	}
}

// sign returns claims signed with method and key, with header kid.
func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
