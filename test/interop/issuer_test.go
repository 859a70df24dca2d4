package interop

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// caAudience is the audience Istio's agent asks for in its tokens.
const caAudience = "istio-ca"

// oidcIssuer is an OIDC issuer on loopback HTTPS: a discovery document, a
// JWKS with one signing key, and tokens shaped like Kubernetes service
// account tokens signed by that key.
type oidcIssuer struct {
	URL    string // issuer, https://127.0.0.1:PORT
	CAFile string // PEM of the server's certificate, for --jwt-ca-file

	signer jose.Signer
}

func startIssuer(t testing.TB) *oidcIssuer { return startIssuerAlg(t, jose.ES256) }

// startIssuerAlg starts an issuer signing with alg: ES256 (a P-256 key) or
// RS256 (an RSA 2048 key, as a Kubernetes API server signs its tokens).
func startIssuerAlg(t testing.TB, alg jose.SignatureAlgorithm) *oidcIssuer {
	t.Helper()
	var key any
	var err error
	switch alg {
	case jose.ES256:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.RS256:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		t.Fatalf("issuer: algorithm %s is not supported here", alg)
	}
	if err != nil {
		t.Fatalf("issuer key: %v", err)
	}
	jwk := jose.JSONWebKey{Key: key, KeyID: "interop-1", Algorithm: string(alg), Use: "sig"}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jwk},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatalf("issuer signer: %v", err)
	}
	iss := &oidcIssuer{signer: signer}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                iss.URL,
			"jwks_uri":                              iss.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{string(alg)},
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwk.Public()}})
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	iss.URL = srv.URL

	iss.CAFile = filepath.Join(t.TempDir(), "issuer-ca.pem")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(iss.CAFile, caPEM, 0o600); err != nil {
		t.Fatalf("write issuer CA: %v", err)
	}
	return iss
}

// IstiodArgs are the flags that make istiod trust this issuer for tokens
// whose audience includes one of audiences.
func (i *oidcIssuer) IstiodArgs(t testing.TB, audiences ...string) []string {
	t.Helper()
	rule, err := json.Marshal(map[string]any{
		"issuer":    i.URL,
		"jwks_uri":  i.URL + "/jwks",
		"audiences": audiences,
	})
	if err != nil {
		t.Fatalf("jwt rule: %v", err)
	}
	return []string{"--jwt-rule", string(rule), "--jwt-ca-file", i.CAFile}
}

// Token signs a service account token for namespace/serviceAccount with
// audience istio-ca, valid for ten minutes; edits change the claims first.
func (i *oidcIssuer) Token(t testing.TB, namespace, serviceAccount string, edits ...func(*jwt.Claims)) string {
	t.Helper()
	now := time.Now()
	claims := jwt.Claims{
		Issuer:    i.URL,
		Subject:   "system:serviceaccount:" + namespace + ":" + serviceAccount,
		Audience:  jwt.Audience{caAudience},
		IssuedAt:  jwt.NewNumericDate(now.Add(-time.Minute)),
		NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
		Expiry:    jwt.NewNumericDate(now.Add(10 * time.Minute)),
	}
	for _, edit := range edits {
		edit(&claims)
	}
	// aud is always a JSON array, as the Kubernetes API server writes it
	// (and as Istio's JWT authenticator requires), even with one value.
	token, err := jwt.Signed(i.signer).Claims(claims).Claims(map[string]any{"aud": []string(claims.Audience)}).Serialize()
	if err != nil {
		t.Fatalf("sign token: %v", err)
	}
	return token
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
