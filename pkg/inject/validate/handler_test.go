package validate

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	admissionv1 "k8s.io/api/admission/v1"
)

func TestHandlerRefusesBadRequests(t *testing.T) {
	h := NewHandler(testLogger(t))
	valid := reviewFor(t, admission.APIVersionV1, peerAuthn, admissionv1.Create, objectJSON(peerAuthn, `{}`))
	for name, tc := range map[string]struct {
		method, path, contentType string
		body                      []byte
		want                      int
	}{
		"a body over the limit is 413": {
			http.MethodPost, "/validate", "application/json",
			append(append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":"`),
				bytes.Repeat([]byte("a"), MaxRequestBytes)...), '"', '}'),
			http.StatusRequestEntityTooLarge,
		},
		"a YAML content type is 415":    {http.MethodPost, "/validate", "application/yaml", valid, http.StatusUnsupportedMediaType},
		"a missing content type is 415": {http.MethodPost, "/validate", "", valid, http.StatusUnsupportedMediaType},
		"GET is 405":                    {http.MethodGet, "/validate", "application/json", nil, http.StatusMethodNotAllowed},
		"another path is 404":           {http.MethodPost, "/inject", "application/json", valid, http.StatusNotFound},
		"garbage is 400":                {http.MethodPost, "/validate", "application/json", []byte("\x00{not json"), http.StatusBadRequest},
		"another apiVersion is 400": {
			http.MethodPost, "/validate", "application/json",
			[]byte(`{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"1"}}`), http.StatusBadRequest,
		},
		"another kind is 400": {
			http.MethodPost, "/validate", "application/json",
			[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{"uid":"1"}}`), http.StatusBadRequest,
		},
		"a review without a request is 400": {
			http.MethodPost, "/validate", "application/json",
			[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest,
		},
		"a valid review with charset is 200": {http.MethodPost, "/validate/", "application/json; charset=utf-8", valid, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body.String())
			}
			if tc.want == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != http.MethodPost {
				t.Errorf("Allow header %q", rec.Header().Get("Allow"))
			}
		})
	}
}

func TestHandlerEchoesUIDAndVersion(t *testing.T) {
	h := NewHandler(testLogger(t))
	for name, v := range map[string]string{"v1 is echoed": admission.APIVersionV1, "v1beta1 is echoed": admission.APIVersionV1beta1} {
		t.Run(name, func(t *testing.T) {
			out := admitBody(t, h, reviewFor(t, v, peerAuthn, admissionv1.Create, objectJSON(peerAuthn, `{}`)))
			if out.APIVersion != v || out.Kind != "AdmissionReview" || out.Response.UID != "uid-1" || !out.Response.Allowed {
				t.Fatalf("response %+v", out)
			}
		})
	}
}

func TestHandlerRefusesUndecodableObjects(t *testing.T) {
	h := NewHandler(testLogger(t))
	for name, raw := range map[string]string{
		"an object that is not JSON": `"just a string"`,
		"a spec that is a list":      `{"metadata":{"name":"p"},"spec":[1,2]}`,
		"metadata of the wrong type": `{"metadata":[],"spec":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, authzPolicy, admissionv1.Create, []byte(raw)))
			if out.Response.Allowed || out.Response.Result == nil || !strings.Contains(out.Response.Result.Message, "AuthorizationPolicy") {
				t.Fatalf("response %+v", out.Response)
			}
		})
	}
	t.Run("a create without an object", func(t *testing.T) {
		out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, authzPolicy, admissionv1.Create, nil))
		if out.Response.Allowed {
			t.Fatal("allowed")
		}
	})
}

// A panic while validating answers 500 instead of crashing the server.
func TestHandlerRecoversPanics(t *testing.T) {
	h := NewHandler(testLogger(t)).(*handler)
	h.validate = func(kind, []byte) ([]string, error) { panic("boom") }
	rec := post(t, h, "/validate", "application/json",
		reviewFor(t, admission.APIVersionV1, peerAuthn, admissionv1.Create, objectJSON(peerAuthn, `{}`)))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500: %s", rec.Code, rec.Body.String())
	}
}
