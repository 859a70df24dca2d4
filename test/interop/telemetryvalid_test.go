package interop

import (
	"strings"
	"testing"

	telemetry "istio.io/api/telemetry/v1alpha1"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/config/validation"
	"istio.io/istio/pkg/util/protomarshal"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// telemetryCase is one Telemetry of namespace "app", its spec YAML, as
// entryCase.
type telemetryCase struct {
	spec         string
	istioRefuses bool
	stricter     string
	warns        bool
}

var telemetryCases = map[string]telemetryCase{
	"mesh-wide access logging":            {spec: "accessLogging: [{providers: [{name: envoy}]}]"},
	"access logging off":                  {spec: "accessLogging: [{disabled: true}]"},
	"a filter expression":                 {spec: "accessLogging: [{filter: {expression: \"response.code >= 400 || xds.cluster_name == 'x'\"}}]"},
	"a filter that does not parse":        {spec: "accessLogging: [{filter: {expression: \"response.code >=\"}}]", istioRefuses: true},
	"a filter of unbalanced brackets":     {spec: "accessLogging: [{filter: {expression: \"(response.code\"}}]", istioRefuses: true},
	"an empty filter":                     {spec: "accessLogging: [{filter: {expression: \"\"}}]", istioRefuses: true},
	"a provider without a name":           {spec: "accessLogging: [{providers: [{name: \"\"}]}]", istioRefuses: true},
	"a client-side log":                   {spec: "accessLogging: [{match: {mode: CLIENT}, providers: [{name: envoy}]}]"},
	"a workload selector":                 {spec: "selector: {matchLabels: {app: a}}\naccessLogging: [{}]"},
	"a selector without labels":           {spec: "selector: {}\naccessLogging: [{}]", warns: true},
	"a wildcard in a selector":            {spec: "selector: {matchLabels: {app: \"a*\"}}", istioRefuses: true},
	"a selector and a targetRef":          {spec: "selector: {matchLabels: {app: a}}\ntargetRef: {kind: Service, name: a}", istioRefuses: true},
	"a targetRef to a Service":            {spec: "targetRef: {kind: Service, group: \"\", name: a}"},
	"a targetRef to a Deployment":         {spec: "targetRef: {kind: Deployment, group: apps, name: a}", istioRefuses: true},
	"a targetRefs to another namespace":   {spec: "targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: a, namespace: b}]", istioRefuses: true},
	"a targetRef without a name":          {spec: "targetRef: {kind: Service, group: \"\"}", istioRefuses: true},
	"metrics off":                         {spec: "metrics: [{providers: [{name: prometheus}], overrides: [{disabled: true}]}]"},
	"metrics off for clients":             {spec: "metrics: [{overrides: [{match: {metric: ALL_METRICS, mode: CLIENT}, disabled: true}]}]"},
	"a tag added":                         {spec: "metrics: [{overrides: [{match: {metric: REQUEST_COUNT}, tagOverrides: {host: {value: request.host}}}]}]"},
	"a tag removed":                       {spec: "metrics: [{overrides: [{tagOverrides: {request_protocol: {operation: REMOVE}}}]}]"},
	"a tag removed with a value":          {spec: "metrics: [{overrides: [{tagOverrides: {x: {operation: REMOVE, value: a}}}]}]", istioRefuses: true},
	"a tag upserted without a value":      {spec: "metrics: [{overrides: [{tagOverrides: {x: {operation: UPSERT}}}]}]", istioRefuses: true},
	"a tag without a name":                {spec: "metrics: [{overrides: [{tagOverrides: {\"\": {value: \"'a'\"}}}]}]", warns: true},
	"a tag value that is not CEL":         {spec: "metrics: [{overrides: [{tagOverrides: {x: {value: \"request.host +\"}}}]}]", stricter: "not a valid CEL expression"},
	"an empty custom metric":              {spec: "metrics: [{overrides: [{match: {customMetric: \"\"}, disabled: true}]}]", istioRefuses: true},
	"a custom metric":                     {spec: "metrics: [{overrides: [{match: {customMetric: my_metric}, disabled: true}]}]"},
	"a null override (decoded empty)":     {spec: "metrics: [{overrides: [null]}]"},
	"a reporting interval":                {spec: "metrics: [{reportingInterval: 30s}]"},
	"tracing":                             {spec: "tracing: [{randomSamplingPercentage: 10}]"},
	"tracing sampling over 100":           {spec: "tracing: [{randomSamplingPercentage: 101}]", istioRefuses: true},
	"two tracing entries":                 {spec: "tracing: [{}, {}]", warns: true},
	"tracing with two providers":          {spec: "tracing: [{providers: [{name: a}, {name: b}]}]", warns: true},
	"tracing with an empty literal tag":   {spec: "tracing: [{customTags: {t: {literal: {value: \"\"}}}}]", istioRefuses: true},
	"tracing with a header tag":           {spec: "tracing: [{customTags: {t: {header: {name: x-id}}}}]"},
	"tracing with an unnamed environment": {spec: "tracing: [{customTags: {t: {environment: {name: \"\"}}}}]", istioRefuses: true},
	"an expression over Bulwark's bound": {spec: "accessLogging: [{filter: {expression: \"'" + strings.Repeat("a", policy.MaxTelemetryExpression) + "'\"}}]",
		stricter: "more than 4096"},
}

// TestTelemetryValidationAgreesWithIstio: every case is admitted or
// refused by policy.ValidateTelemetry as Istio's own
// validation.ValidateTelemetry decides (its CEL parse of access log
// filters included), with a warning where Istio warns, but for the
// deliberate differences, each refused by Bulwark only.
func TestTelemetryValidationAgreesWithIstio(t *testing.T) {
	refused, stricter := 0, 0
	for name, c := range telemetryCases {
		t.Run(name, func(t *testing.T) {
			spec := &telemetry.Telemetry{}
			if e := protomarshal.ApplyYAMLStrict(c.spec, spec); e != nil {
				t.Fatalf("spec: %v", e)
			}
			meta := config.Meta{Name: "tel", Namespace: "app", GroupVersionKind: gvk.Telemetry}
			warn, err := validation.ValidateTelemetry(config.Config{Meta: meta, Spec: spec})
			r, d := agreeWithIstio(t, policy.ValidateTelemetry(spec), err, warn, c.istioRefuses, c.warns, c.stricter)
			if r {
				refused++
			}
			if d {
				stricter++
			}
		})
	}
	t.Logf("%d Telemetries, %d refused, %d deliberate differences", len(telemetryCases), refused, stricter)
	if refused < 10 || stricter < 2 {
		t.Errorf("%d refused, %d deliberate differences: the cases do not cover both sides", refused, stricter)
	}
}
