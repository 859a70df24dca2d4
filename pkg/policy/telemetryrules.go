package policy

import (
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	telemetry "istio.io/api/telemetry/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// Limits on a Telemetry: what one object may make every proxy it selects
// evaluate. Istio has none; these are generous for real configurations.
const (
	// MaxTelemetryExpression bounds an access log filter's CEL
	// expression and a tag override's value (a CEL expression too), in
	// bytes.
	MaxTelemetryExpression = 4096
	// MaxTelemetryEntries bounds the metrics, accessLogging and tracing
	// entries of one Telemetry, the providers of one entry, the overrides
	// of one metrics entry and the tag overrides of one override.
	MaxTelemetryEntries = 64
	// maxCELRecursion bounds the nesting of a CEL expression.
	maxCELRecursion = 32
)

// celEnv parses CEL expressions as istio-proxy's filters do, bounded.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.ParserExpressionSizeLimit(MaxTelemetryExpression), cel.ParserRecursionLimit(maxCELRecursion))
})

// CheckCEL says why expr is not a CEL expression Envoy could parse, or ""
// when it is: Istio's validation parses access log filters the same way
// (pkg/config/validation validateTelemetryFilter).
func CheckCEL(expr string) string {
	if len(expr) > MaxTelemetryExpression {
		return fmt.Sprintf("%d bytes, more than %d", len(expr), MaxTelemetryExpression)
	}
	env, err := celEnv()
	if err != nil {
		return "no CEL parser: " + err.Error()
	}
	if _, iss := env.Parse(expr); iss != nil && iss.Err() != nil {
		return "not a valid CEL expression: " + truncate(strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	return ""
}

// ValidateTelemetry checks a telemetry.istio.io Telemetry as Istio's
// validation does (pkg/config/validation ValidateTelemetry), within this
// package's limits, and more strictly in one respect: a tag override's
// value must parse as CEL, as istio-proxy's stats filter parses it (Istio
// admits any, and the proxy then refuses the listener). Errors refuse it;
// warnings are Istio's.
func ValidateTelemetry(spec *telemetry.Telemetry) Findings {
	var f Findings
	set := 0
	if spec.GetSelector() != nil {
		set++
	}
	if spec.GetTargetRef() != nil {
		set++
	}
	if len(spec.GetTargetRefs()) > 0 {
		set++
	}
	if set > 1 {
		f.errorf("spec", "only one of selector, targetRef and targetRefs may be set")
	}
	checkPolicySelector(&f, "spec.selector", spec.GetSelector())
	if r := spec.GetTargetRef(); r != nil {
		checkTargetRef(&f, "spec.targetRef", r)
	}
	for i, r := range spec.GetTargetRefs() {
		checkTargetRef(&f, at("spec.targetRefs", i), r)
	}
	if len(spec.GetMetrics()) > MaxTelemetryEntries || len(spec.GetAccessLogging()) > MaxTelemetryEntries ||
		len(spec.GetTracing()) > MaxTelemetryEntries || len(spec.GetTargetRefs()) > MaxTelemetryEntries {
		f.errorf("spec", "more than %d metrics, accessLogging, tracing or targetRefs entries", MaxTelemetryEntries)
		return f
	}
	for i, m := range spec.GetMetrics() {
		checkTelemetryMetrics(&f, at("spec.metrics", i), m)
	}
	for i, l := range spec.GetAccessLogging() {
		path := at("spec.accessLogging", i)
		if l == nil {
			continue
		}
		if l.GetFilter() != nil {
			f.check(path+".filter.expression", CheckCEL(l.GetFilter().GetExpression()))
		}
		checkProviders(&f, path+".providers", l.GetProviders())
	}
	checkTelemetryTracing(&f, spec.GetTracing())
	return f
}

func checkTelemetryMetrics(f *Findings, path string, m *telemetry.Metrics) {
	if m == nil {
		return
	}
	checkProviders(f, path+".providers", m.GetProviders())
	if len(m.GetOverrides()) > MaxTelemetryEntries {
		f.errorf(path+".overrides", "more than %d overrides", MaxTelemetryEntries)
		return
	}
	for i, o := range m.GetOverrides() {
		opath := at(path+".overrides", i)
		if o == nil {
			f.errorf(opath, "must not be null")
			continue
		}
		if len(o.GetTagOverrides()) > MaxTelemetryEntries {
			f.errorf(opath+".tagOverrides", "more than %d tag overrides", MaxTelemetryEntries)
			continue
		}
		for _, name := range sortedKeys(o.GetTagOverrides()) {
			to := o.GetTagOverrides()[name]
			tpath := key(opath+".tagOverrides", name)
			if name == "" {
				f.warnf(tpath, "a tag name must not be empty")
			}
			if to == nil {
				f.errorf(tpath, "must not be null")
				continue
			}
			switch to.GetOperation() {
			case telemetry.MetricsOverrides_TagOverride_UPSERT:
				if to.GetValue() == "" {
					f.errorf(tpath+".value", "must be set when the operation is UPSERT")
					continue
				}
				f.check(tpath+".value", CheckCEL(to.GetValue()))
			case telemetry.MetricsOverrides_TagOverride_REMOVE:
				if to.GetValue() != "" {
					f.errorf(tpath+".value", "may only be set when the operation is UPSERT")
				}
			}
		}
		if cm, ok := o.GetMatch().GetMetricMatch().(*telemetry.MetricSelector_CustomMetric); ok && cm.CustomMetric == "" {
			f.errorf(opath+".match.customMetric", "must not be empty")
		}
	}
}

func checkTelemetryTracing(f *Findings, tracing []*telemetry.Tracing) {
	if len(tracing) > 1 {
		f.warnf("spec.tracing", "several tracing entries are not supported")
	}
	for i, t := range tracing {
		path := at("spec.tracing", i)
		if t == nil {
			continue
		}
		if len(t.GetProviders()) > 1 {
			f.warnf(path+".providers", "several providers are not supported")
		}
		checkProviders(f, path+".providers", t.GetProviders())
		if p := t.GetRandomSamplingPercentage().GetValue(); p < 0 || p > 100 {
			f.errorf(path+".randomSamplingPercentage", "must be in [0, 100]")
		}
		for _, name := range sortedKeys(t.GetCustomTags()) {
			tag := t.GetCustomTags()[name]
			tpath := key(path+".customTags", name)
			if name == "" {
				f.errorf(tpath, "a tag name must not be empty")
			}
			if tag == nil {
				f.errorf(tpath, "must not be null")
				continue
			}
			switch v := tag.GetType().(type) {
			case *telemetry.Tracing_CustomTag_Literal:
				if v.Literal.GetValue() == "" {
					f.errorf(tpath+".literal.value", "must not be empty")
				}
			case *telemetry.Tracing_CustomTag_Header:
				if v.Header.GetName() == "" {
					f.errorf(tpath+".header.name", "must not be empty")
				}
			case *telemetry.Tracing_CustomTag_Environment:
				if v.Environment.GetName() == "" {
					f.errorf(tpath+".environment.name", "must not be empty")
				}
			}
		}
	}
}

// checkProviders checks provider references: each names one.
func checkProviders(f *Findings, path string, providers []*telemetry.ProviderRef) {
	if len(providers) > MaxTelemetryEntries {
		f.errorf(path, "more than %d providers", MaxTelemetryEntries)
		return
	}
	for i, p := range providers {
		if p.GetName() == "" {
			f.errorf(at(path, i)+".name", "must not be empty")
			return // Istio reports the first
		}
	}
}

// checkPolicySelector checks a policy's workload selector as Istio's
// validateWorkloadSelector does.
func checkPolicySelector(f *Findings, path string, sel *typev1beta1.WorkloadSelector) {
	if sel == nil {
		return
	}
	for _, k := range sortedKeys(sel.GetMatchLabels()) {
		v := sel.GetMatchLabels()[k]
		switch {
		case k == "":
			f.errorf(path+".matchLabels", "an empty key is not supported")
		case strings.Contains(k, "*") || strings.Contains(v, "*"):
			f.errorf(key(path+".matchLabels", k), "a wildcard is not supported")
		}
	}
	if len(sel.GetMatchLabels()) == 0 {
		f.warnf(path, "no labels: it selects every workload of the namespace")
	}
}

// targetKinds are the kinds a policy's targetRef may name (group, kind),
// as Istio's validatePolicyTargetReference allows them.
var targetKinds = map[[2]string]bool{
	{"", "Service"}: true, {"networking.istio.io", "ServiceEntry"}: true,
	{"gateway.networking.k8s.io", "Gateway"}: true, {"gateway.networking.k8s.io", "GatewayClass"}: true,
}

func checkTargetRef(f *Findings, path string, r *typev1beta1.PolicyTargetReference) {
	if r.GetName() == "" {
		f.errorf(path+".name", "must be set")
	}
	if r.GetNamespace() != "" {
		f.errorf(path+".namespace", "must not be set: a policy may not name a target of another namespace")
	}
	group := r.GetGroup()
	if group == "core" {
		group = ""
	}
	if !targetKinds[[2]string{group, r.GetKind()}] {
		f.errorf(path, "%s/%s is not a kind a policy may target (Service, ServiceEntry, Gateway, GatewayClass)", quote(r.GetGroup()), quote(r.GetKind()))
	}
}
