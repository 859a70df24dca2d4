package validate

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
)

var telemetryKind = gvk{"telemetry.istio.io", "v1", "Telemetry"}

// The rules are package policy's, tested there and against Istio's
// validator in test/interop; these cases check that the webhook asks them.
func TestTelemetry(t *testing.T) {
	runSpecCases(t, map[string]specCase{
		"an access log filter is allowed": {
			kind: telemetryKind,
			spec: `{"accessLogging":[{"providers":[{"name":"envoy"}],"filter":{"expression":"response.code >= 400"}}]}`,
		},
		"a filter that is not CEL is refused": {
			kind:    telemetryKind,
			spec:    `{"accessLogging":[{"filter":{"expression":"response.code >="}}]}`,
			refused: "spec.accessLogging[0].filter.expression: not a valid CEL expression",
		},
		"an UPSERT without a value is refused": {
			kind:    telemetryKind,
			spec:    `{"metrics":[{"overrides":[{"tagOverrides":{"x":{"operation":"UPSERT"}}}]}]}`,
			refused: "spec.metrics[0].overrides[0].tagOverrides[x].value: must be set",
		},
		"an unknown field is refused": {
			kind: telemetryKind, spec: `{"acessLogging":[]}`, refused: "unknown field",
		},
	})
}

func TestTelemetryVersionsAndWarnings(t *testing.T) {
	h := NewHandler(testLogger(t))
	for _, v := range []string{"v1", "v1alpha1"} {
		k := gvk{"telemetry.istio.io", v, "Telemetry"}
		t.Run(v, func(t *testing.T) {
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, k, admissionv1.Create,
				objectJSON(k, `{"accessLogging":[{"providers":[{"name":""}]}]}`)))
			if out.Response.Allowed {
				t.Fatal("a provider without a name was allowed")
			}
			out = admitBody(t, h, reviewFor(t, admission.APIVersionV1, k, admissionv1.Create,
				objectJSON(k, `{"tracing":[{"randomSamplingPercentage":10}]}`)))
			if !out.Response.Allowed || !strings.Contains(strings.Join(out.Response.Warnings, "\n"), "spec.tracing: tracing is not generated") {
				t.Fatalf("tracing: allowed %t, warnings %q", out.Response.Allowed, out.Response.Warnings)
			}
		})
	}
}
