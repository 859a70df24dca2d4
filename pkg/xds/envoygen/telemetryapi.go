package envoygen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	accesslog "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	celfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	telemetryv1 "istio.io/api/telemetry/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// The Telemetry API, as Istio's generator honours it
// (pilot/pkg/model/telemetry.go, pilot/pkg/networking/core/accesslog.go):
// the Telemetries that select a proxy (model.TelemetryScope) are merged,
// in order, with mesh config's defaultProviders into, for each listener
// class, the providers that log and those that count; a Prometheus
// provider that counts is an istio.stats filter, an Envoy file access log
// provider that logs an access log, with the CEL filter of its
// Telemetry entry.

// celFilterName is Envoy's CEL access log filter.
const celFilterName = "envoy.access_loggers.extension_filters.cel"

// builtinProviders are the providers Istio's mesh config defines whatever
// it is given (pkg/config/mesh DefaultMeshConfig).
func builtinProviders() []*meshv1alpha1.MeshConfig_ExtensionProvider {
	return []*meshv1alpha1.MeshConfig_ExtensionProvider{
		{Name: "prometheus", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus{
			Prometheus: &meshv1alpha1.MeshConfig_ExtensionProvider_PrometheusMetricsProvider{},
		}},
		{Name: "stackdriver", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Stackdriver{
			Stackdriver: &meshv1alpha1.MeshConfig_ExtensionProvider_StackdriverProvider{},
		}},
		{Name: builtinAccessLogProvider, Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog{
			EnvoyFileAccessLog: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider{Path: "/dev/stdout"},
		}},
	}
}

// builtinAccessLogProvider is Istio's built-in file access log provider,
// which takes mesh config's accessLogEncoding and accessLogFormat.
const builtinAccessLogProvider = "envoy"

// withBuiltinProviders is own after Istio's built-in providers, as Istio
// merges mesh config: a provider of a built-in's name replaces what it
// provides, the others follow.
func withBuiltinProviders(own []*meshv1alpha1.MeshConfig_ExtensionProvider) []*meshv1alpha1.MeshConfig_ExtensionProvider {
	out := builtinProviders()
	for _, p := range own {
		if i := slices.IndexFunc(out, func(e *meshv1alpha1.MeshConfig_ExtensionProvider) bool { return e.GetName() == p.GetName() }); i >= 0 {
			out[i] = &meshv1alpha1.MeshConfig_ExtensionProvider{Name: out[i].GetName(), Provider: p.GetProvider()}
			continue
		}
		out = append(out, p)
	}
	return out
}

// findProvider is the provider a Telemetry names, as Istio finds it:
// the first whose name equals it but for case.
func findProvider(providers []*meshv1alpha1.MeshConfig_ExtensionProvider, name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	for _, p := range providers {
		if strings.EqualFold(p.GetName(), name) {
			return p
		}
	}
	return nil
}

// maxScopes bounds the scopes a Telemetry memoizes: past it, it forgets
// them all and builds again.
const maxScopes = 4096

// telemetryMemo keeps the Telemetries of the scopes asked for, by content.
type telemetryMemo struct {
	mu    sync.Mutex
	built map[string]*scopeEntry
}

type scopeEntry struct {
	once sync.Once
	t    *Telemetry
	err  error
}

// ForScope is t, a mesh config's Telemetry, with the Telemetries of sc
// merged in, as Istio merges them; t itself when no Telemetry applies
// (its filters are the merge of none: mesh config's defaultProviders).
// Equal contents share one Telemetry, whose filters are built once.
func (t *Telemetry) ForScope(sc model.TelemetryScope) (*Telemetry, error) {
	if t == nil || t.scopes == nil || sc.Empty() {
		return t, nil
	}
	all := sc.All()
	specs := make([]*telemetryv1.Telemetry, len(all))
	h := sha256.New()
	for i, tel := range all {
		specs[i] = tel.Spec
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(tel.Spec)
		if err != nil {
			return nil, fmt.Errorf("telemetry %s/%s: %w", tel.Namespace, tel.Name, err)
		}
		fmt.Fprintf(h, "%d:", len(raw))
		h.Write(raw)
	}
	k := "tel:" + hex.EncodeToString(h.Sum(nil)[:12])
	m := t.scopes
	m.mu.Lock()
	if m.built == nil || len(m.built) >= maxScopes {
		m.built = map[string]*scopeEntry{}
	}
	e, ok := m.built[k]
	if !ok {
		e = &scopeEntry{}
		m.built[k] = e
	}
	m.mu.Unlock()
	e.once.Do(func() {
		s := &Telemetry{cfg: t.cfg, key: k, tcpMX: t.tcpMX, httpMX: t.httpMX}
		if e.err = s.build(specs); e.err == nil {
			e.t = s
		}
	})
	return e.t, e.err
}

// Notes say what of the mesh config's providers, or of the Telemetries of
// t's scope, is not generated.
func (t *Telemetry) Notes() []string {
	if t == nil {
		return nil
	}
	return t.notes
}

func (t *Telemetry) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(t.notes, msg) {
		t.notes = append(t.notes, msg)
	}
}

// workloadMode is the Telemetry mode of a listener class.
func workloadMode(c telemetryClass) telemetryv1.WorkloadMode {
	if c == sidecarInbound {
		return telemetryv1.WorkloadMode_SERVER
	}
	return telemetryv1.WorkloadMode_CLIENT
}

// logSpec is what the merge of access logging says of one provider.
type logSpec struct {
	disabled bool
	filter   *telemetryv1.AccessLogging_Filter
}

// mergeLogging is the access logging of specs for listeners of mode, by
// provider name: nil when neither specs nor defaults configure logging,
// so that mesh config's accessLogFile applies. A provider that a later
// entry names without a filter loses the filter an earlier one gave it;
// an entry without providers applies to the providers of the entry
// before it (defaults first); a provider not among the last providers
// named is dropped, as in Istio.
func mergeLogging(specs []*telemetryv1.Telemetry, defaults []string, mode telemetryv1.WorkloadMode) map[string]logSpec {
	var groups [][]*telemetryv1.AccessLogging
	for _, s := range specs {
		if len(s.GetAccessLogging()) > 0 {
			groups = append(groups, s.GetAccessLogging())
		}
	}
	if len(groups) == 0 && len(defaults) == 0 {
		return nil
	}
	out := map[string]logSpec{}
	if len(groups) == 0 {
		for _, p := range defaults {
			out[p] = logSpec{}
		}
		return out
	}
	inScope := defaults
	filters := map[string]logSpec{}
	for _, g := range groups {
		var named []string
		for _, l := range g {
			if !matchesMode(l.GetMatch(), mode) {
				continue
			}
			for _, p := range l.GetProviders() {
				named = append(named, p.GetName())
				filters[p.GetName()] = logSpec{filter: l.GetFilter()}
			}
		}
		if len(named) > 0 {
			inScope = named
		}
	}
	parent := defaults
	for _, g := range groups {
		for _, l := range g {
			names := providerNames(l.GetProviders())
			if len(names) == 0 {
				names = parent
			}
			parent = names
			if !matchesMode(l.GetMatch(), mode) {
				continue
			}
			for _, p := range names {
				switch {
				case !slices.Contains(inScope, p):
				case l.GetDisabled().GetValue():
					out[p] = logSpec{disabled: true}
				default:
					out[p] = filters[p]
				}
			}
		}
	}
	return out
}

func matchesMode(sel *telemetryv1.AccessLogging_LogSelector, mode telemetryv1.WorkloadMode) bool {
	return sel == nil || sel.GetMode() == telemetryv1.WorkloadMode_CLIENT_AND_SERVER || sel.GetMode() == mode
}

func providerNames(refs []*telemetryv1.ProviderRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.GetName())
	}
	return out
}

// accessLogs are the access logs of chains and listeners of class c: the
// Telemetry API's when specs or mesh config's defaultProviders configure
// logging, else mesh config's accessLogFile.
func (t *Telemetry) accessLogs(specs []*telemetryv1.Telemetry, c telemetryClass) (logs, listenerLogs []*accesslog.AccessLog, err error) {
	merged := mergeLogging(specs, t.cfg.DefaultAccessLogging, workloadMode(c))
	type configured struct {
		name string
		spec logSpec
		al   *accesslog.AccessLog // nil: a provider of a type not generated
	}
	var cfgs []configured
	for name, spec := range merged {
		p := findProvider(t.cfg.Providers, name)
		if p == nil {
			t.note("access log provider %q is not among the mesh config's extensionProviders: it logs nothing (as in Istio)", name)
			continue
		}
		al, logs, err := t.providerAccessLog(p)
		if err != nil {
			return nil, nil, err
		}
		if !logs {
			continue // no access log of this type (as in Istio)
		}
		if al == nil {
			t.note("access log provider %q (%s) is not generated: only Envoy file access logs are", p.GetName(), providerType(p))
		}
		cfgs = append(cfgs, configured{name: p.GetName(), spec: spec, al: al})
	}
	if merged == nil || len(cfgs) == 0 {
		// As in Istio: no provider that logs, mesh config's file applies.
		return t.meshAccessLogs()
	}
	slices.SortStableFunc(cfgs, func(a, b configured) int { return strings.Compare(a.name, b.name) })
	for _, cfg := range cfgs {
		if cfg.spec.disabled || cfg.al == nil {
			continue
		}
		cel, err := celAccessLogFilter(cfg.spec.filter)
		if err != nil {
			return nil, nil, err
		}
		logs = append(logs, withFilter(cfg.al, cel))
		listenerLogs = append(listenerLogs, withFilter(cfg.al, noRouteFilter(), cel))
	}
	return logs, listenerLogs, nil
}

// withFilter is al with the conjunction of filters (those not nil).
func withFilter(al *accesslog.AccessLog, filters ...*accesslog.AccessLogFilter) *accesslog.AccessLog {
	filters = slices.DeleteFunc(slices.Clone(filters), func(f *accesslog.AccessLogFilter) bool { return f == nil })
	out := &accesslog.AccessLog{Name: al.GetName(), ConfigType: al.GetConfigType()}
	switch len(filters) {
	case 0:
	case 1:
		out.Filter = filters[0]
	default:
		out.Filter = &accesslog.AccessLogFilter{FilterSpecifier: &accesslog.AccessLogFilter_AndFilter{
			AndFilter: &accesslog.AndFilter{Filters: filters},
		}}
	}
	return out
}

// celAccessLogFilter is Envoy's CEL filter of a Telemetry entry's
// filter.expression; nil for none. Telemetries whose expressions do not
// parse are refused before (policy.ValidateTelemetry).
func celAccessLogFilter(f *telemetryv1.AccessLogging_Filter) (*accesslog.AccessLogFilter, error) {
	if f == nil {
		return nil, nil
	}
	a, err := deterministicAny(&celfilter.ExpressionFilter{Expression: f.GetExpression()})
	if err != nil {
		return nil, fmt.Errorf("access log filter: %w", err)
	}
	return &accesslog.AccessLogFilter{FilterSpecifier: &accesslog.AccessLogFilter_ExtensionFilter{
		ExtensionFilter: &accesslog.ExtensionFilter{Name: celFilterName, ConfigType: &accesslog.ExtensionFilter_TypedConfig{TypedConfig: a}},
	}}, nil
}

// providerType names the kind of provider p.
func providerType(p *meshv1alpha1.MeshConfig_ExtensionProvider) string {
	name := fmt.Sprintf("%T", p.GetProvider())
	name = strings.TrimPrefix(name, "*v1alpha1.MeshConfig_ExtensionProvider_")
	return name
}

// providerAccessLog is the access log of provider p: logs is false for a
// provider of a type that keeps none (metrics, tracing, authorization),
// al nil for one that logs elsewhere than to a file (the access log
// services, OpenTelemetry), which Bulwark does not generate.
func (t *Telemetry) providerAccessLog(p *meshv1alpha1.MeshConfig_ExtensionProvider) (al *accesslog.AccessLog, logs bool, err error) {
	switch prov := p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog:
		fp := prov.EnvoyFileAccessLog
		if p.GetName() == builtinAccessLogProvider && fp.GetLogFormat() == nil && !fp.GetOmitEmptyValues() {
			// The built-in provider takes mesh config's encoding and
			// format, to its own path.
			c := t.cfg
			c.AccessLogFile = fp.GetPath()
			al, err = fileAccessLog(c)
		} else {
			al, err = providerFileAccessLog(fp)
		}
		if err != nil {
			return nil, true, err
		}
		return al, true, nil
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyHttpAls, *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyTcpAls,
		*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOtelAls:
		return nil, true, nil
	}
	return nil, false, nil
}

// TelemetryFor is the telemetry of the proxy of namespace with labels in
// snap: g.Telemetry with the Telemetries selecting it merged in, those
// validation refuses left out (reported by the server). Should a scope's
// filters fail to build, which validation rules out, the mesh config's
// apply.
func (g *Generator) TelemetryFor(snap *model.Snapshot, namespace string, labels map[string]string) *Telemetry {
	if g.Telemetry == nil {
		return nil
	}
	sc := snap.TelemetriesFor(namespace, labels, g.valid.admits)
	t, err := g.Telemetry.ForScope(sc)
	if err != nil {
		return g.Telemetry
	}
	return t
}

// maxValidated bounds the Telemetries validTelemetries remembers.
const maxValidated = 8192

// validTelemetries remembers which Telemetries policy.ValidateTelemetry
// admits, so that each is checked once, not per proxy.
type validTelemetries struct {
	mu   sync.Mutex
	seen map[*model.Telemetry]bool
}

func (v *validTelemetries) admits(t *model.Telemetry) bool {
	v.mu.Lock()
	ok, found := v.seen[t]
	v.mu.Unlock()
	if found {
		return ok
	}
	f := policy.ValidateTelemetry(t.Spec)
	ok = f.OK()
	v.mu.Lock()
	if v.seen == nil || len(v.seen) >= maxValidated {
		v.seen = map[*model.Telemetry]bool{}
	}
	v.seen[t] = ok
	v.mu.Unlock()
	return ok
}
