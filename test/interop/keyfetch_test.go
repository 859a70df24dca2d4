package interop

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	"istio.io/istio/security/pkg/pki/util"
)

// metadataSecret stands for the cloud credentials a metadata service
// answers: it must never reach istiod's log.
const metadataSecret = "AKIAIOSFODNN7EXAMPLE-wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"

// TestHostileIssuerCannotTurnIstiodAgainstItsNetwork runs istiod against an
// issuer on loopback that points its key fetches at the cloud metadata
// service or answers them with credentials, and sends CSRs with tokens of
// that issuer: each is refused, the keys are fetched once for all of them,
// and istiod's log names the cause without the answer.
func TestHostileIssuerCannotTurnIstiodAgainstItsNetwork(t *testing.T) {
	t.Parallel()
	const metadataURL = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
	tests := map[string]struct {
		withJWKSURI bool
		discovery   func(w http.ResponseWriter, issuer string)
		keys        func(w http.ResponseWriter, r *http.Request)
		wantLog     string
	}{
		"a discovery document naming the metadata service": {
			discovery: func(w http.ResponseWriter, issuer string) {
				writeJSON(w, map[string]string{"issuer": issuer, "jwks_uri": metadataURL})
			},
			wantLog: "http is allowed only for loopback hosts",
		},
		"a key set answering a redirect to the metadata service": {
			withJWKSURI: true,
			keys: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, metadataURL, http.StatusFound)
			},
			wantLog: "redirect to another scheme or host refused",
		},
		"a key set answering credentials with an error status": {
			withJWKSURI: true,
			keys: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, `{"AccessKeyId":"`+metadataSecret+`"}`, http.StatusForbidden)
			},
			wantLog: "status 403",
		},
		"a key set answering credentials as a web page": {
			withJWKSURI: true,
			keys: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				_, _ = w.Write([]byte("<html>" + metadataSecret + "</html>"))
			},
			wantLog: "content type that is not JSON",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var fetches atomic.Int32
			var issuerURL string
			mux := http.NewServeMux()
			mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
				fetches.Add(1)
				if tc.discovery == nil {
					http.NotFound(w, nil)
					return
				}
				tc.discovery(w, issuerURL)
			})
			mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
				fetches.Add(1)
				tc.keys(w, r)
			})
			hostile := httptest.NewServer(mux) // plain http on loopback, as the rule allows
			t.Cleanup(hostile.Close)
			issuerURL = hostile.URL

			signer := startIssuer(t) // signs the tokens; its URL is replaced
			signer.URL = hostile.URL
			rule := map[string]any{"issuer": hostile.URL, "audiences": []string{caAudience}}
			if tc.withJWKSURI {
				rule["jwks_uri"] = hostile.URL + "/keys"
			}
			ruleJSON, err := json.Marshal(rule)
			if err != nil {
				t.Fatal(err)
			}
			p := startIstiod(t, "--jwt-rule", string(ruleJSON))
			client := dialCA(t, p, p.MintCert(t, "istio-system", "bundle-reader").Root, nil)

			const csrs = 5
			for i := range csrs {
				csrPEM, _, err := util.GenCSR(util.CertOptions{Host: "spiffe://cluster.local/ns/default/sa/demo", ECSigAlg: util.EcdsaSigAlg})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				ctx = metadata.AppendToOutgoingContext(ctx, "ClusterID", clusterID,
					"authorization", "Bearer "+signer.Token(t, "default", "demo"))
				_, err = client.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(csrPEM), ValidityDuration: int64(certTTL / time.Second)})
				cancel()
				// No keys: fail closed, with a retryable code, so that
				// agents recover once the issuer serves keys again.
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("CSR %d: %v, want %v", i, err, codes.Unavailable)
				}
			}
			if n := fetches.Load(); n != 1 {
				t.Errorf("the issuer was asked %d times for %d CSRs, want once", n, csrs)
			}
			logs := p.logs.String()
			if !strings.Contains(logs, tc.wantLog) {
				t.Errorf("istiod's log does not say %q", tc.wantLog)
			}
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, metadataSecret[:16]) {
					t.Errorf("istiod logged the hostile answer: %s", line)
				}
			}
		})
	}
}
