package validate

import (
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
)

var serviceEntry = gvk{"networking.istio.io", "v1", "ServiceEntry"}

// The rules are package policy's, tested there and against Istio's
// validator in test/interop; these cases check that the webhook asks them.
func TestServiceEntry(t *testing.T) {
	runSpecCases(t, map[string]specCase{
		"a DNS entry is allowed": {
			kind: serviceEntry,
			spec: `{"hosts":["api.example.com"],"location":"MESH_EXTERNAL","resolution":"DNS","ports":[{"number":443,"name":"https","protocol":"TLS"}]}`,
		},
		"the host * is refused": {
			kind:    serviceEntry,
			spec:    `{"hosts":["*"],"resolution":"NONE","ports":[{"number":80,"name":"http","protocol":"HTTP"}]}`,
			refused: "spec.hosts[0]: the host * would take every name",
		},
		"endpoints with resolution NONE are refused": {
			kind:    serviceEntry,
			spec:    `{"hosts":["a.example.com"],"resolution":"NONE","ports":[{"number":80,"name":"http","protocol":"HTTP"}],"endpoints":[{"address":"10.0.0.1"}]}`,
			refused: "spec.endpoints: resolution NONE takes no endpoints",
		},
		"an unknown field is refused": {
			kind: serviceEntry, spec: `{"hosts":["a.example.com"],"resolushun":"DNS"}`, refused: "unknown field",
		},
	})
}

func TestServiceEntryVersionsAreValidated(t *testing.T) {
	h := NewHandler(testLogger(t))
	for _, v := range []string{"v1", "v1beta1", "v1alpha3"} {
		k := gvk{"networking.istio.io", v, "ServiceEntry"}
		t.Run(v, func(t *testing.T) {
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, k, admissionv1.Create, objectJSON(k, `{}`)))
			if out.Response.Allowed {
				t.Fatal("an entry without hosts was allowed")
			}
		})
	}
}
