package validate

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// gvk names a kind as the apiserver sends it in request.kind.
type gvk struct{ group, version, kind string }

var (
	peerAuthn    = gvk{"security.istio.io", "v1", "PeerAuthentication"}
	authzPolicy  = gvk{"security.istio.io", "v1", "AuthorizationPolicy"}
	requestAuthn = gvk{"security.istio.io", "v1", "RequestAuthentication"}
	destRule     = gvk{"networking.istio.io", "v1", "DestinationRule"}
)

// objectJSON wraps spec (JSON) in an object of kind k named ns/name.
func objectJSON(k gvk, spec string) []byte {
	obj := `{"apiVersion":"` + k.group + "/" + k.version + `","kind":"` + k.kind +
		`","metadata":{"name":"p","namespace":"ns"}`
	if spec != "" {
		obj += `,"spec":` + spec
	}
	return []byte(obj + "}")
}

// reviewFor makes an AdmissionReview body for op on object raw.
func reviewFor(t testing.TB, apiVersion string, k gvk, op admissionv1.Operation, raw []byte) []byte {
	t.Helper()
	req := admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Group: k.group, Version: k.version, Kind: k.kind},
		Namespace: "ns",
		Name:      "p",
		Operation: op,
	}
	if raw != nil {
		req.Object = runtime.RawExtension{Raw: raw}
	}
	b, err := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": "AdmissionReview", "request": req})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t testing.TB, h http.Handler, path, contentType string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// admitBody posts body and returns the decoded response.
func admitBody(t testing.TB, h http.Handler, body []byte) admission.Review {
	t.Helper()
	rec := post(t, h, "/validate", "application/json", body)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	var out admission.Review
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("decode response %q: %v", rec.Body.String(), err)
	}
	return out
}
