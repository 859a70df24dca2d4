package validate

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
)

// TestWarningsSayWhatIsIgnored: the webhook admits every Istio object it
// does not refuse, with a warning for each thing Bulwark ignores of it, as
// package policy says; an object honoured whole gets none.
func TestWarningsSayWhatIsIgnored(t *testing.T) {
	h := NewHandler(testLogger(t))
	envoyFilter := gvk{"networking.istio.io", "v1alpha3", "EnvoyFilter"}
	telemetry := gvk{"telemetry.istio.io", "v1", "Telemetry"}
	httpRoute := gvk{"gateway.networking.k8s.io", "v1", "HTTPRoute"}
	betaDestRule := gvk{"networking.istio.io", "v1beta1", "DestinationRule"}
	inferencePool := gvk{"inference.networking.k8s.io", "v1", "InferencePool"}
	backendTraffic := gvk{"gateway.networking.x-k8s.io", "v1alpha1", "XBackendTrafficPolicy"}
	for name, tc := range map[string]struct {
		kind gvk
		spec string
		want []string
	}{
		"an EnvoyFilter is admitted, ignored whole": {
			kind: envoyFilter, spec: `{"configPatches":[]}`,
			want: []string{"EnvoyFilter ns/p is not honoured as written: the whole object: Bulwark does not read this kind"},
		},
		"a Telemetry's tracing is named": {
			kind: telemetry, spec: `{"accessLogging":[{}],"tracing":[{}]}`,
			want: []string{"Telemetry ns/p is not honoured as written: spec.tracing: tracing is not generated: no proxy gets a tracer from a Telemetry"},
		},
		"a Gateway API route is ignored whole": {
			kind: httpRoute, spec: `{}`,
			want: []string{"HTTPRoute ns/p is not honoured as written: the whole object: Bulwark does not read this kind"},
		},
		"an Inference Extension pool is ignored whole": {
			kind: inferencePool, spec: `{"selector":{"matchLabels":{"app":"model"}},"targetPorts":[{"number":8000}]}`,
			want: []string{"InferencePool ns/p is not honoured as written: the whole object: Bulwark does not read this kind"},
		},
		"an experimental Gateway API policy is ignored whole": {
			kind: backendTraffic, spec: `{"targetRefs":[{"group":"","kind":"Service","name":"a"}]}`,
			want: []string{"XBackendTrafficPolicy ns/p is not honoured as written: the whole object: Bulwark does not read this kind"},
		},
		"a DestinationRule's load balancer and outlier detection are named": {
			kind: destRule, spec: `{"host":"a.ns.svc.cluster.local","trafficPolicy":{"loadBalancer":{"simple":"ROUND_ROBIN"},"outlierDetection":{"consecutive5xxErrors":3}}}`,
			want: []string{
				"DestinationRule ns/p is not honoured as written: spec.trafficPolicy.loadBalancer: ignored, not generated",
				"DestinationRule ns/p is not honoured as written: spec.trafficPolicy.outlierDetection: ignored, not generated",
			},
		},
		"another version of a kind gets the same warnings": {
			kind: betaDestRule, spec: `{"host":"a.ns.svc.cluster.local","trafficPolicy":{"outlierDetection":{"consecutive5xxErrors":3}}}`,
			want: []string{"DestinationRule ns/p is not honoured as written: spec.trafficPolicy.outlierDetection: ignored, not generated"},
		},
		"a connection pool is named for proxyless clients alone": {
			kind: destRule, spec: `{"host":"a.ns.svc.cluster.local","trafficPolicy":{"connectionPool":{"tcp":{"maxConnections":1}}}}`,
			want: []string{"DestinationRule ns/p is not honoured as written: spec.trafficPolicy.connectionPool: applied by Envoy proxies only, not by proxyless gRPC clients"},
		},
		"a DestinationRule of TLS only gets none": {
			kind: destRule, spec: `{"host":"a.ns.svc.cluster.local","trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"}}}`,
		},
		"an AuthorizationPolicy attached by targetRef is named": {
			kind: authzPolicy, spec: `{"targetRef":{"group":"gateway.networking.k8s.io","kind":"Gateway","name":"gw"},"action":"DENY","rules":[{}]}`,
			want: []string{"AuthorizationPolicy ns/p is not honoured as written: spec.targetRef: attaches the policy to gateways or waypoints, which Bulwark does not serve; it applies to no sidecar"},
		},
		"a PeerAuthentication gets none": {
			kind: peerAuthn, spec: `{"mtls":{"mode":"STRICT"}}`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, tc.kind, admissionv1.Create, objectJSON(tc.kind, tc.spec)))
			if !out.Response.Allowed {
				t.Fatalf("refused: %+v", out.Response.Result)
			}
			if !slices.Equal(out.Response.Warnings, tc.want) {
				t.Errorf("warnings\n got %q\nwant %q", out.Response.Warnings, tc.want)
			}
		})
	}
}

// TestRefusalsCarryNoWarnings: an object refused is refused for its
// reason, without warnings about fields.
func TestRefusalsCarryNoWarnings(t *testing.T) {
	h := NewHandler(testLogger(t))
	out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, destRule, admissionv1.Create,
		objectJSON(destRule, `{"host":"","trafficPolicy":{"loadBalancer":{"simple":"ROUND_ROBIN"}}}`)))
	if out.Response.Allowed || len(out.Response.Warnings) != 0 {
		t.Fatalf("response %+v", out.Response)
	}
}

// TestWarningsAreBounded: an object with many ignored fields gets at most
// maxWarnings warnings and one saying how many more, each short enough for
// the apiserver to pass whole.
func TestWarningsAreBounded(t *testing.T) {
	h := NewHandler(testLogger(t))
	var subsets []string
	for range 30 {
		subsets = append(subsets, `{"name":"v`+string(rune('a'+len(subsets)%26))+strings.Repeat("x", len(subsets))+`","trafficPolicy":{"loadBalancer":{}}}`)
	}
	out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, destRule, admissionv1.Create,
		objectJSON(destRule, `{"host":"a","subsets":[`+strings.Join(subsets, ",")+`]}`)))
	if !out.Response.Allowed {
		t.Fatalf("refused: %+v", out.Response.Result)
	}
	w := out.Response.Warnings
	if len(w) != maxWarnings+1 || !strings.Contains(w[maxWarnings], "and 20 more") {
		t.Fatalf("%d warnings: %q", len(w), w)
	}
	for _, s := range w {
		if len(s) > 256 {
			t.Errorf("warning of %d bytes: %s", len(s), s)
		}
	}
}
