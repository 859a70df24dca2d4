package xds

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// unservedTypes names the type URLs Istio's istiod serves and Bulwark does
// not, with what asks for them; any other type URL a proxy asks for is
// "other". The names are the metric's type label, so a proxy cannot grow
// its label set.
var unservedTypes = map[string]struct{ name, what string }{
	"type.googleapis.com/istio.networking.nds.v1.NameTable": {"nds",
		"the DNS proxy's name table (pilot-agent with ISTIO_META_DNS_CAPTURE): the agent answers no mesh names itself; DNS goes to the cluster's resolver"},
	"type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig": {"ecds",
		"extension configuration (WasmPlugin, Telemetry extensions), which Bulwark does not read"},
	"type.googleapis.com/istio.workload.Address": {"wds", "ambient's workloads (ztunnel), which Bulwark does not serve"},
	"type.googleapis.com/istio.security.Authorization": {"authorization",
		"ambient's authorization policies (ztunnel), which Bulwark does not serve"},
}

// unservedLogEvery is how often a type's unserved requests are logged.
const unservedLogEvery = 5 * time.Minute

// unserved logs and counts the requests of types istiod does not serve:
// the proxy is not sent them, and without this it would not be said.
type unserved struct {
	counter *prometheus.CounterVec // bulwark_xds_unserved_requests_total{type}
	now     func() time.Time

	mu     sync.Mutex
	logged map[string]time.Time // by type label: when last logged
}

func newUnserved(now func() time.Time) *unserved {
	return &unserved{now: now, logged: map[string]time.Time{},
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_xds_unserved_requests_total",
			Help: "xDS requests of types istiod does not serve, by type (nds: DNS proxying's name table; ecds: extension config; " +
				"wds, authorization: ambient; other): the proxy is sent nothing for them.",
		}, []string{"type"})}
}

// note counts a request of typeURL, and says whether to log it: once per
// type label in unservedLogEvery. It returns the label and what the type
// is for.
func (u *unserved) note(typeURL string) (label, what string, log bool) {
	t, ok := unservedTypes[typeURL]
	if !ok {
		t.name, t.what = "other", "a type istiod does not serve"
	}
	u.counter.WithLabelValues(t.name).Inc()
	now := u.now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if last, ok := u.logged[t.name]; ok && now.Sub(last) < unservedLogEvery {
		return t.name, t.what, false
	}
	u.logged[t.name] = now
	return t.name, t.what, true
}

// maxLoggedTypeURL bounds the type URL a log line repeats: a proxy chose it.
const maxLoggedTypeURL = 128

// sayUnserved logs (now and then) and counts p's request of typeURL, a
// type not served.
func (s *Server) sayUnserved(p *proxy, typeURL string) {
	label, what, log := s.unserved.note(typeURL)
	if !log {
		return
	}
	p.mu.Lock()
	id := p.node.GetId()
	p.mu.Unlock()
	s.log.Warn("xDS type not served: the proxy is sent nothing for it", "type", label,
		"typeURL", typeURL[:min(len(typeURL), maxLoggedTypeURL)], "for", what, "proxy", id,
		"metric", "bulwark_xds_unserved_requests_total")
}
