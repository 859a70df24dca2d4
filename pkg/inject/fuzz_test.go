package inject

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	corev1 "k8s.io/api/core/v1"
)

// FuzzInject drives arbitrary AdmissionReview bytes through the handler and
// an arbitrary value of each honoured annotation through Inject. Neither may
// panic, and an injected pod always has exactly one istio-proxy with the
// restricted security context.
func FuzzInject(f *testing.F) {
	f.Add(reviewBody(f, admission.APIVersionV1, appPod(nil, nil)), uint8(0), "docker.io/istio/proxyv2:1.28.0")
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1","kind":{"kind":"Pod"},"object":{"spec":{"containers":[{"name":"a","readinessProbe":{"tcpSocket":{"port":"x"}}}]}}}}`), uint8(11), "concurrency: 2")
	f.Add([]byte("{not json"), uint8(1), "1\nsecurityContext:\n  privileged: true")
	h := NewHandler(NewStore(), nil)
	p := Params{}
	{
		snap := NewStore().Load()
		p = Params{Namespace: "default", Config: snap.Config, Values: snap.Values}
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8, value string) {
		rec := post(t, h, "/inject", "application/json", body)
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("handler panicked or failed on %q", body)
		}
		if rec.Code == http.StatusOK {
			var out admission.Review
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("200 without a response: %v", err)
			}
		}

		anno := honoured[int(which)%len(honoured)]
		pod := appPod(map[string]string{anno: value}, nil)
		pod.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: httpProbe("/live", 8080)}
		mutated, res, err := Mutate(pod, p)
		if err != nil || !res.Injected {
			return
		}
		assertShape(t, mutated, []string{"app", "metrics"})
		res, err = Inject(pod, p)
		if err != nil {
			t.Fatalf("Mutate succeeded but Inject failed: %v", err)
		}
		orig, _ := json.Marshal(pod)
		want, _ := json.Marshal(mutated)
		patched, err := applyPatch(orig, res.Patch)
		if err != nil {
			t.Fatalf("apply patch: %v", err)
		}
		if !jsonEqual(t, want, patched) {
			t.Fatalf("the patch does not give the mutated pod")
		}
	})
}
