package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestInjectWebhookServesOverTLS posts an AdmissionReview to /inject as the
// kube-apiserver would, verifying istiod's serving certificate for its
// Service name against the trust bundle.
func TestInjectWebhookServesOverTLS(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	p := startIstiod(t, state)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(mustRead(t, mint(t, state, "default", "demo").path("root-cert.pem")))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12,
	}}}

	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
	  "uid":"e2e-1","kind":{"group":"","version":"v1","kind":"Pod"},
	  "resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","namespace":"shop",
	  "object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop","labels":{"app":"web"}},
	    "spec":{"serviceAccountName":"web","containers":[{"name":"web","image":"nginx","ports":[{"containerPort":80}]}]}}}}`
	resp, err := client.Post("https://"+p.webhook+"/inject", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var out struct {
		Response struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Patch   []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Response.UID != "e2e-1" || !out.Response.Allowed {
		t.Fatalf("response uid=%q allowed=%t", out.Response.UID, out.Response.Allowed)
	}
	for _, want := range []string{`"name":"istio-proxy"`, `"name":"istio-init"`, "istiod.istio-system.svc:15012"} {
		if !bytes.Contains(out.Response.Patch, []byte(want)) {
			t.Errorf("patch lacks %s", want)
		}
	}
}

// TestValidateWebhookRefusesAnInvalidPolicy posts an AuthorizationPolicy
// whose DENY has no rules, which Istio refuses, to /validate.
func TestValidateWebhookRefusesAnInvalidPolicy(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	p := startIstiod(t, state)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(mustRead(t, mint(t, state, "default", "demo").path("root-cert.pem")))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12,
	}}}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
	  "uid":"e2e-2","kind":{"group":"security.istio.io","version":"v1","kind":"AuthorizationPolicy"},
	  "resource":{"group":"security.istio.io","version":"v1","resource":"authorizationpolicies"},"operation":"CREATE","namespace":"shop",
	  "object":{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"name":"deny-nothing","namespace":"shop"},
	    "spec":{"action":"DENY"}}}}`
	resp, err := client.Post("https://"+p.webhook+"/validate", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Response struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Result  struct {
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Response.UID != "e2e-2" || out.Response.Allowed {
		t.Fatalf("uid=%q allowed=%t, want a refusal", out.Response.UID, out.Response.Allowed)
	}
	if out.Response.Result.Message == "" {
		t.Error("refusal carries no reason")
	}
}
