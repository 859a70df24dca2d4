package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func reviewBody(t testing.TB, apiVersion string, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": apiVersion,
		"kind":       "AdmissionReview",
		"request": admissionv1.AdmissionRequest{
			UID:       types.UID("3f1c9a2e-0000-4000-8000-000000000001"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "default",
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t testing.TB, h http.Handler, path, contentType string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decodeResponse(t testing.TB, rec *httptest.ResponseRecorder) admission.Review {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admission.Review
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response: %v", err)
	}
	if out.Response == nil {
		t.Fatal("no response")
	}
	return out
}

func TestHandlerInjects(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t))
	for _, version := range []string{admission.APIVersionV1, admission.APIVersionV1beta1} {
		for _, path := range []string{"/inject", "/inject/", "/inject/cluster/east/net/net1"} {
			t.Run(version+path, func(t *testing.T) {
				pod := appPod(map[string]string{"example.com/owner~team": "a/b"}, nil)
				rec := post(t, h, path, "application/json; charset=utf-8", reviewBody(t, version, pod))
				out := decodeResponse(t, rec)
				if out.APIVersion != version || out.Kind != "AdmissionReview" {
					t.Errorf("envelope %s %s, want %s AdmissionReview", out.APIVersion, out.Kind, version)
				}
				r := out.Response
				if !r.Allowed || r.UID != "3f1c9a2e-0000-4000-8000-000000000001" {
					t.Fatalf("response = %+v", r)
				}
				if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Fatalf("patch type = %v", r.PatchType)
				}
				// Keys with "/" and "~" are escaped as ~1 and ~0.
				if !bytes.Contains(r.Patch, []byte(`"/metadata/annotations/sidecar.istio.io~1status"`)) {
					t.Errorf("status annotation path not escaped: %s", r.Patch)
				}
				orig, _ := json.Marshal(pod)
				var ops []patchOp
				if err := json.Unmarshal(r.Patch, &ops); err != nil {
					t.Fatal(err)
				}
				patched, err := applyPatch(orig, toOps(ops))
				if err != nil {
					t.Fatalf("apply patch: %v", err)
				}
				var got corev1.Pod
				if err := json.Unmarshal(patched, &got); err != nil {
					t.Fatal(err)
				}
				assertShape(t, &got, []string{"app", "metrics"})
				if got.Annotations["example.com/owner~team"] != "a/b" {
					t.Errorf("existing annotation lost: %v", got.Annotations)
				}
				if strings.Contains(path, "east") {
					if v, _ := envValue(proxyOf(&got), "ISTIO_META_CLUSTER_ID"); v != "east" {
						t.Errorf("cluster from path = %q", v)
					}
					if v, _ := envValue(proxyOf(&got), "ISTIO_META_NETWORK"); v != "net1" {
						t.Errorf("network from path = %q", v)
					}
				}
			})
		}
	}
}

func TestHandlerDeniesInvalidAnnotation(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t))
	pod := appPod(map[string]string{AnnotationProxyMemory: "1\nsecurityContext:\n  privileged: true"}, nil)
	out := decodeResponse(t, post(t, h, "/inject", "application/json", reviewBody(t, admission.APIVersionV1, pod)))
	r := out.Response
	if r.Allowed || r.Patch != nil || r.Result == nil || !strings.Contains(r.Result.Message, AnnotationProxyMemory) {
		t.Fatalf("response = %+v", r)
	}
	if r.UID == "" {
		t.Error("UID not echoed on denial")
	}
}

func TestHandlerAllowsWithoutPatch(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t))
	cases := map[string]func(*corev1.Pod){
		"an opted-out pod":        func(p *corev1.Pod) { p.Labels = map[string]string{LabelInject: "false"} },
		"an already injected pod": func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationStatus: "{}"} },
		"a host-network pod":      func(p *corev1.Pod) { p.Spec.HostNetwork = true },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			pod := appPod(nil, nil)
			mutate(pod)
			r := decodeResponse(t, post(t, h, "/inject", "application/json", reviewBody(t, admission.APIVersionV1, pod))).Response
			if !r.Allowed || r.Patch != nil {
				t.Fatalf("response = %+v", r)
			}
		})
	}
}

func TestHandlerRejectsBadRequests(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t))
	good := reviewBody(t, admission.APIVersionV1, appPod(nil, nil))
	big := append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"`),
		bytes.Repeat([]byte("a"), MaxRequestBytes)...)
	cases := map[string]struct {
		method, path, ctype string
		body                []byte
		want                int
	}{
		"a GET is not allowed":                      {http.MethodGet, "/inject", "application/json", nil, http.StatusMethodNotAllowed},
		"a body over 6 MiB is too large":            {http.MethodPost, "/inject", "application/json", big, http.StatusRequestEntityTooLarge},
		"a YAML body is unsupported":                {http.MethodPost, "/inject", "application/yaml", good, http.StatusUnsupportedMediaType},
		"a missing content type is unsupported":     {http.MethodPost, "/inject", "", good, http.StatusUnsupportedMediaType},
		"garbage is a bad request":                  {http.MethodPost, "/inject", "application/json", []byte("{not json"), http.StatusBadRequest},
		"an unknown apiVersion is a bad request":    {http.MethodPost, "/inject", "application/json", []byte(`{"apiVersion":"v1","kind":"AdmissionReview","request":{}}`), http.StatusBadRequest},
		"a review without request is a bad request": {http.MethodPost, "/inject", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest},
		"another path is not found":                 {http.MethodPost, "/validate", "application/json", good, http.StatusNotFound},
		"a malformed cluster path is not found":     {http.MethodPost, "/inject/cluster/east", "application/json", good, http.StatusNotFound},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("status = %d, want %d (%s)", rec.Code, tc.want, rec.Body)
			}
			if tc.want == http.StatusBadRequest && rec.Body.Len() == 0 {
				t.Error("no message")
			}
		})
	}
}

func TestHandlerRecoversFromPanics(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t), WithNamespaceLabels(func(string) map[string]string {
		panic("informer exploded")
	}))
	rec := post(t, h, "/inject", "application/json", reviewBody(t, admission.APIVersionV1, appPod(nil, nil)))
	if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "exploded") {
		t.Fatalf("status %d body %q", rec.Code, rec.Body)
	}
}

func TestHandlerUsesNamespaceLabels(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t), WithNamespaceLabels(func(ns string) map[string]string {
		return map[string]string{"istio-injection": "disabled"}
	}))
	r := decodeResponse(t, post(t, h, "/inject", "application/json", reviewBody(t, admission.APIVersionV1, appPod(nil, nil)))).Response
	if !r.Allowed || r.Patch != nil {
		t.Fatalf("response = %+v", r)
	}
}

func bigPod(n int) *corev1.Pod {
	pod := appPod(nil, nil)
	pod.Spec.Containers = nil
	for i := 0; i < n; i++ {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name:           fmt.Sprintf("c%d", i),
			Image:          "example.com/app:1",
			Ports:          []corev1.ContainerPort{{ContainerPort: int32(10000 + i)}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: httpProbe("/ready", 10000+i)},
		})
	}
	return pod
}

// A pod of 1,000 containers is handled: every probe is rewritten and the
// response is bounded (a test never asserts on wall-clock time; the
// benchmark below measures it).
func TestHandlerThousandContainers(t *testing.T) {
	h := NewHandler(NewStore(), testLogger(t))
	pod := bigPod(1000)
	body := reviewBody(t, admission.APIVersionV1, pod)
	if len(body) > MaxRequestBytes {
		t.Fatalf("test body %d bytes is over the limit", len(body))
	}
	r := decodeResponse(t, post(t, h, "/inject", "application/json", body)).Response
	if !r.Allowed {
		t.Fatalf("denied: %+v", r.Result)
	}
	var ops []patchOp
	if err := json.Unmarshal(r.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	orig, _ := json.Marshal(pod)
	patched, err := applyPatch(orig, toOps(ops))
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Containers) != 1001 || countProxies(&got) != 1 {
		t.Fatalf("%d containers", len(got.Spec.Containers))
	}
	probers, _ := envValue(proxyOf(&got), EnvAppProbers)
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(probers), &m); err != nil || len(m) != 1000 {
		t.Fatalf("%d probers, err %v", len(m), err)
	}
}

func BenchmarkHandlerThousandContainers(b *testing.B) {
	h := NewHandler(NewStore(), nil)
	body := reviewBody(b, admission.APIVersionV1, bigPod(1000))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		rec := post(b, h, "/inject", "application/json", body)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
