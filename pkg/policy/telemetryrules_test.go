package policy

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	telemetry "istio.io/api/telemetry/v1"
)

// The agreement of ValidateTelemetry with Istio's validator is tested in
// test/interop (TestTelemetryValidationAgreesWithIstio); these cases
// cover the bounds and the checks Istio does not make.
func TestTelemetryLimits(t *testing.T) {
	upsert := func(v string) *telemetry.Telemetry {
		return &telemetry.Telemetry{Metrics: []*telemetry.Metrics{{Overrides: []*telemetry.MetricsOverrides{{
			TagOverrides: map[string]*telemetry.MetricsOverrides_TagOverride{"t": {Value: v}},
		}}}}}
	}
	filter := func(expr string) *telemetry.Telemetry {
		return &telemetry.Telemetry{AccessLogging: []*telemetry.AccessLogging{{Filter: &telemetry.AccessLogging_Filter{Expression: expr}}}}
	}
	for name, tc := range map[string]struct {
		spec *telemetry.Telemetry
		want string
	}{
		"a filter of the limit's size is allowed": {spec: filter("'" + strings.Repeat("a", MaxTelemetryExpression-2) + "'")},
		"a filter over the limit is refused": {spec: filter("'" + strings.Repeat("a", MaxTelemetryExpression-1) + "'"),
			want: "spec.accessLogging[0].filter.expression: 4097 bytes, more than 4096"},
		"a deeply nested filter is refused": {spec: filter(strings.Repeat("(", 100) + "true" + strings.Repeat(")", 100)),
			want: "not a valid CEL expression"},
		"a tag value that is not CEL is refused": {spec: upsert("request.host +"),
			want: "spec.metrics[0].overrides[0].tagOverrides[t].value: not a valid CEL expression"},
		"a tag value that is CEL is allowed": {spec: upsert("request.host")},
		"65 metrics entries are refused": {spec: &telemetry.Telemetry{Metrics: make([]*telemetry.Metrics, MaxTelemetryEntries+1)},
			want: "spec: more than 64"},
	} {
		t.Run(name, func(t *testing.T) {
			f := ValidateTelemetry(tc.spec)
			got := strings.Join(f.Errors, "; ")
			switch {
			case tc.want == "" && !f.OK():
				t.Fatalf("refused: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("errors %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTelemetryIgnoredFields(t *testing.T) {
	k, ok := Lookup(groupTelemetry, "Telemetry")
	if !ok || k.Support != Partly || !k.NeedsSpec() {
		t.Fatalf("Telemetry: %+v", k)
	}
	spec := map[string]any{
		"selector":      map[string]any{"matchLabels": map[string]any{"app": "a"}},
		"tracing":       []any{map[string]any{}},
		"metrics":       []any{map[string]any{"providers": []any{}, "overrides": []any{map[string]any{"match": map[string]any{}, "later": true}}}},
		"accessLogging": []any{map[string]any{"filter": map[string]any{}, "match": map[string]any{}, "disabled": true}},
	}
	got := k.Ignored(nil, spec)
	want := []string{
		"spec.tracing: " + notTraced,
		"spec.metrics[0].overrides[0].later: ignored, not generated",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ignored\n got %q\nwant %q", got, want)
	}
	if got := k.Ignored(nil, map[string]any{"accessLogging": []any{map[string]any{}}}); len(got) != 0 {
		t.Errorf("a Telemetry of access logging alone: %q", got)
	}
}

// FuzzTelemetry drives arbitrary Telemetry specs (protojson, as the
// webhook decodes them) and expressions through the rules. Nothing may
// panic; findings stay within their bound; an admitted Telemetry holds no
// expression CheckCEL refuses.
func FuzzTelemetry(f *testing.F) {
	f.Add([]byte(`{"accessLogging":[{"providers":[{"name":"envoy"}],"filter":{"expression":"response.code >= 400"}}]}`), "a.b[0] + 'x'")
	f.Add([]byte(`{"metrics":[{"overrides":[{"match":{"customMetric":""},"tagOverrides":{"":{"value":"("},"x":{"operation":"REMOVE","value":"a"}}}]}]}`), strings.Repeat("(", 200))
	f.Add([]byte(`{"selector":{"matchLabels":{"":"*"}},"targetRef":{"kind":"Pod"},"tracing":[{"randomSamplingPercentage":101,"customTags":{"":{}}}]}`), `"\u0000" in {}`)
	f.Fuzz(func(t *testing.T, spec []byte, expr string) {
		_ = CheckCEL(expr)
		tel := &telemetry.Telemetry{}
		if protojson.Unmarshal(spec, tel) != nil {
			return
		}
		f := ValidateTelemetry(tel)
		if len(f.Errors) > maxFindings || len(f.Warnings) > maxFindings {
			t.Fatalf("%d errors, %d warnings: unbounded", len(f.Errors), len(f.Warnings))
		}
		if !f.OK() {
			return
		}
		for _, l := range tel.GetAccessLogging() {
			if l.GetFilter() != nil && CheckCEL(l.GetFilter().GetExpression()) != "" {
				t.Fatalf("admitted a filter Envoy refuses: %q", l.GetFilter().GetExpression())
			}
		}
	})
}
