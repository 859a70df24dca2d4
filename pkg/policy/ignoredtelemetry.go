package policy

import (
	"fmt"
)

// The fields of a Telemetry that Envoy sidecars read (pkg/xds/envoygen):
// any other is reported as ignored.
var (
	telemetryFields     = set("selector", "targetRef", "targetRefs", "metrics", "accessLogging", "tracing")
	telemetryMetrics    = set("providers", "overrides", "reportingInterval")
	telemetryOverride   = set("match", "disabled", "tagOverrides")
	telemetryLogging    = set("providers", "disabled", "filter", "match")
	notTraced           = "tracing is not generated: no proxy gets a tracer from a Telemetry"
	telemetryNotApplied = "attaches the Telemetry to gateways or waypoints by reference; it configures no sidecar (as in Istio) and Bulwark serves neither"
)

func ignoredInTelemetry(_ map[string]string, spec map[string]any) []string {
	out := unknownFields("spec", spec, telemetryFields)
	for _, f := range []string{"targetRef", "targetRefs"} {
		if _, ok := spec[f]; ok {
			out = append(out, "spec."+f+": "+telemetryNotApplied)
		}
	}
	if _, ok := spec["tracing"]; ok {
		out = append(out, "spec.tracing: "+notTraced)
	}
	for i, m := range list(spec["metrics"]) {
		path := fmt.Sprintf("spec.metrics[%d]", i)
		out = append(out, unknownFields(path, object(m), telemetryMetrics)...)
		for j, o := range list(object(m)["overrides"]) {
			out = append(out, unknownFields(fmt.Sprintf("%s.overrides[%d]", path, j), object(o), telemetryOverride)...)
		}
	}
	for i, l := range list(spec["accessLogging"]) {
		out = append(out, unknownFields(fmt.Sprintf("spec.accessLogging[%d]", i), object(l), telemetryLogging)...)
	}
	return out
}
