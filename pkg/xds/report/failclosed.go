package report

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
)

// failClosed counts the parts of policies not applied as written, which
// fail closed instead, by kind and reason.
type failClosed map[[2]string]int

func (f failClosed) add(kind, reason string) { f[[2]string{kind, reason}]++ }

// addAuthz counts an AuthorizationPolicy problem of effect e, by how it
// fails closed. A policy with no effect (a DENY without rules, an AUDIT
// gRPC cannot log) does not fail closed: it is only logged.
func (f failClosed) addAuthz(e authz.Effect) {
	switch e {
	case authz.Dropped:
		f.add("AuthorizationPolicy", "allow_rule_dropped")
	case authz.Widened:
		f.add("AuthorizationPolicy", "deny_rule_widened")
	case authz.DeniesAll:
		f.add("AuthorizationPolicy", "denies_all")
	}
}

// NewFailClosedGauge is bulwark_policy_fail_closed{kind,reason}, for
// Config.FailClosed; the caller registers it.
func NewFailClosedGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bulwark_policy_fail_closed",
		Help: "Parts of policies not applied as written, failing closed instead, by kind and reason: AuthorizationPolicy allow_rule_dropped, deny_rule_widened, denies_all; RequestAuthentication tokens_refused; DestinationRule tls_refused; Gateway server_conflict, server_invalid, server_unsupported, server_refused (servers a connected router does not serve); VirtualService (or Gateway) route_left_out (parts of VirtualServices a connected router's routes leave out), sidecar_routes_left_out (mesh VirtualService rules sidecars leave out); ServiceEntry host_taken; Sidecar hides_istiod (its egress leaves out istiod's Service), hosts_over_limit (egress hosts past the bound, not read), proxyless_ignored (fields of Sidecars proxyless gRPC clients, one being connected, do not read: ingress, inboundConnectionPool, outboundTrafficPolicy other than REGISTRY_ONLY); Telemetry refused (Telemetries validation refuses, which no proxy applies). Each is logged once.",
	}, []string{"kind", "reason"})
}

// setFailClosed makes the gauge g say f: the problems of the last model
// checked, and no others; g may be nil.
func setFailClosed(g *prometheus.GaugeVec, f failClosed) {
	if g == nil {
		return
	}
	g.Reset()
	for k, n := range f {
		g.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}
