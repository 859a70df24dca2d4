package envoygen

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	stats "istio.io/api/envoy/extensions/stats"
	telemetryv1 "istio.io/api/telemetry/v1"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
)

// metricOverride is what the overrides of a provider say of one metric
// in one mode.
type metricOverride struct {
	disabled *wrapperspb.BoolValue
	tags     map[string]*telemetryv1.MetricsOverrides_TagOverride
}

// providerMetrics is the merged metrics configuration of one provider.
type providerMetrics struct {
	interval *durationpb.Duration
	// modes: the overrides by mode (CLIENT, SERVER) and metric name;
	// a mode absent has none.
	modes map[telemetryv1.WorkloadMode]map[string]*metricOverride
	// off: the modes of which every metric is disabled.
	off map[telemetryv1.WorkloadMode]bool
}

// allMetrics are Istio's standard metrics by their selector names, sorted.
var allMetrics = func() []string {
	var out []string
	for name, v := range telemetryv1alpha1.MetricSelector_IstioMetric_value {
		if v != int32(telemetryv1.MetricSelector_ALL_METRICS) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}()

// prometheusNames are the names istio-proxy's stats filter gives Istio's
// standard metrics (after its "istio_" prefix).
var prometheusNames = map[string]string{
	"REQUEST_COUNT":          "requests_total",
	"REQUEST_DURATION":       "request_duration_milliseconds",
	"REQUEST_SIZE":           "request_bytes",
	"RESPONSE_SIZE":          "response_bytes",
	"TCP_OPENED_CONNECTIONS": "tcp_connections_opened_total",
	"TCP_CLOSED_CONNECTIONS": "tcp_connections_closed_total",
	"TCP_SENT_BYTES":         "tcp_sent_bytes_total",
	"TCP_RECEIVED_BYTES":     "tcp_received_bytes_total",
	"GRPC_REQUEST_MESSAGES":  "request_messages_total",
	"GRPC_RESPONSE_MESSAGES": "response_messages_total",
}

// mergeMetrics merges the metrics entries of specs, in order, with the
// default providers, by provider name, as Istio does: an entry without
// providers applies to those of the entry before it (defaults first); the
// providers of the last entry naming some are the ones configured; the
// overrides of later entries apply over those of earlier ones, metric by
// metric and tag by tag; disabling every metric of a mode drops the
// filter of that mode, until a later override of the mode.
func mergeMetrics(specs []*telemetryv1.Telemetry, defaults []string) map[string]*providerMetrics {
	var entries []*telemetryv1.Metrics
	for _, s := range specs {
		entries = append(entries, s.GetMetrics()...)
	}
	out := map[string]*providerMetrics{}
	if len(entries) == 0 {
		for _, p := range defaults {
			out[p] = &providerMetrics{}
		}
	}
	inScope := defaults
	for _, m := range entries {
		if names := providerNames(m.GetProviders()); len(names) > 0 {
			inScope = names
		}
	}
	parent := defaults
	for _, m := range entries {
		names := providerNames(m.GetProviders())
		if len(names) == 0 {
			names = parent
		}
		parent = names
		for _, p := range names {
			if !slices.Contains(inScope, p) {
				continue
			}
			pm := out[p]
			if pm == nil || pm.modes == nil {
				pm = &providerMetrics{
					modes: map[telemetryv1.WorkloadMode]map[string]*metricOverride{telemetryv1.WorkloadMode_CLIENT: {}, telemetryv1.WorkloadMode_SERVER: {}},
					off:   map[telemetryv1.WorkloadMode]bool{},
				}
				out[p] = pm
			}
			if m.GetReportingInterval() != nil {
				pm.interval = m.GetReportingInterval()
			}
			for _, o := range m.GetOverrides() {
				pm.override(o)
			}
		}
	}
	return out
}

func (pm *providerMetrics) override(o *telemetryv1.MetricsOverrides) {
	modes := []telemetryv1.WorkloadMode{telemetryv1.WorkloadMode_CLIENT, telemetryv1.WorkloadMode_SERVER}
	if m := o.GetMatch().GetMode(); m == telemetryv1.WorkloadMode_CLIENT || m == telemetryv1.WorkloadMode_SERVER {
		modes = []telemetryv1.WorkloadMode{m}
	}
	all, names := metricsMatched(o.GetMatch())
	if all && o.GetDisabled().GetValue() {
		for _, mode := range modes {
			pm.off[mode] = true
		}
		return
	}
	for _, mode := range modes {
		pm.off[mode] = false
		for _, name := range names {
			mo := pm.modes[mode][name]
			if mo == nil {
				mo = &metricOverride{}
				pm.modes[mode][name] = mo
			}
			if o.GetDisabled() != nil {
				mo.disabled = o.GetDisabled()
			}
			for tag, to := range o.GetTagOverrides() {
				if mo.tags == nil {
					mo.tags = map[string]*telemetryv1.MetricsOverrides_TagOverride{}
				}
				mo.tags[tag] = to
			}
		}
	}
}

// metricsMatched says whether sel selects every metric, and the names of
// those it selects.
func metricsMatched(sel *telemetryv1.MetricSelector) (all bool, names []string) {
	switch m := sel.GetMetricMatch().(type) {
	case *telemetryv1.MetricSelector_CustomMetric:
		return false, []string{m.CustomMetric}
	case *telemetryv1.MetricSelector_Metric:
		if m.Metric != telemetryv1.MetricSelector_ALL_METRICS {
			return false, []string{m.Metric.String()}
		}
	}
	return true, allMetrics
}

// statsConfigs are the istio.stats configurations of chains of class c:
// one per Prometheus provider the merged metrics configure, by provider
// name, none for a mode whose metrics are all disabled.
func (t *Telemetry) statsConfigs(specs []*telemetryv1.Telemetry, c telemetryClass) ([]*anypb.Any, error) {
	merged := mergeMetrics(specs, t.cfg.DefaultMetrics)
	var out []*anypb.Any
	for _, name := range slices.Sorted(maps.Keys(merged)) {
		p := findProvider(t.cfg.Providers, name)
		switch {
		case p == nil:
			t.note("metrics provider %q is not among the mesh config's extensionProviders: it counts nothing (as in Istio)", name)
			continue
		case p.GetPrometheus() == nil:
			if c == sidecarOutbound {
				t.note("metrics provider %q (%s) is not generated: only Prometheus providers are (as in Istio)", name, providerType(p))
			}
			continue
		}
		pm := merged[name]
		mode := workloadMode(c)
		if pm.off[mode] {
			continue
		}
		cfg := &stats.PluginConfig{DisableHostHeaderFallback: c != sidecarOutbound, TcpReportingDuration: pm.interval}
		overrides := pm.modes[mode]
		for _, metric := range slices.Sorted(maps.Keys(overrides)) {
			mo := overrides[metric]
			mc := &stats.MetricConfig{Name: cmp.Or(prometheusNames[metric], metric), Dimensions: map[string]string{}, Drop: mo.disabled.GetValue()}
			for _, tag := range slices.Sorted(maps.Keys(mo.tags)) {
				if mo.tags[tag].GetOperation() == telemetryv1.MetricsOverrides_TagOverride_REMOVE {
					mc.TagsToRemove = append(mc.TagsToRemove, tag)
					continue
				}
				mc.Dimensions[tag] = mo.tags[tag].GetValue()
			}
			cfg.Metrics = append(cfg.Metrics, mc)
		}
		a, err := deterministicAny(cfg)
		if err != nil {
			return nil, fmt.Errorf("stats filter: %w", err)
		}
		out = append(out, a)
	}
	return out, nil
}
