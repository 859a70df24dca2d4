// Package report says, once each while it lasts, what of the mesh's
// configuration istiod does not apply as written and how each part fails
// closed instead: AuthorizationPolicy rules dropped or widened,
// RequestAuthentications whose tokens are refused, DestinationRule TLS
// refused, Gateway servers and VirtualService routes left out, Sidecars
// that hide istiod or that proxyless clients do not read, Telemetries
// refused, network gateways left out, ServiceEntry hosts taken. Each is
// a log line, and a count in bulwark_policy_fail_closed{kind,reason}.
//
// It is apart from the ADS server because it serves no proxy: the server
// hands it each model snapshot it pushes, the mesh configuration's
// generation, and which proxies are connected (routers' Gateways and
// proxyless clients' rules are reported only while such proxies are
// connected); it asks package policy and the generators what they refuse.
package report

import (
	"log/slog"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
	"github.com/bulwark-mesh/bulwark/pkg/xds/generation"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/reqauthn"
)

// Config configures a Reporter.
type Config struct {
	TrustDomain spiffeid.TrustDomain
	// SystemNamespace is istiod's namespace, whose istiod Service a
	// Sidecar must not hide; "": the mesh's root namespace.
	SystemNamespace string
	// JWKSRule is what RequestAuthentication key sets may be fetched from.
	JWKSRule keyfetch.URLRule
	// FailClosed (NewFailClosedGauge) is set to the problems of the last
	// snapshot reported; nil: not counted.
	FailClosed *prometheus.GaugeVec
	Logger     *slog.Logger
}

// Connected is what the reporter reads of the connected proxies.
type Connected struct {
	// Routers are the workloads of the connected Envoy gateways: their
	// Gateways' servers and routes are reported, once per distinct scope.
	Routers []*identity.Workload
	// Proxyless is whether a proxyless gRPC client is connected: what
	// gRPC does not read of Sidecars and VirtualServices is reported.
	Proxyless bool
}

// Reporter logs the problems of the snapshots it is given.
type Reporter struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	reported map[string]bool // policy problems logged, by description
	// checked are the problems of the AuthorizationPolicies last
	// reported, by policy: a snapshot shares the unchanged ones.
	checked map[*model.AuthorizationPolicy][]authz.Problem
}

// New returns a reporter for cfg. It does no I/O and starts nothing.
func New(cfg Config) *Reporter {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{cfg: cfg, log: cfg.Logger}
}

// scan is one Report: the reporter, with what the snapshot is seen with.
type scan struct {
	*Reporter
	mesh      *generation.Mesh
	connected Connected
}

// Report logs what of snap cannot be enforced as written under mesh (the
// mesh configuration's generation), and how each part fails closed
// instead: each problem once, not again with every model change while it
// lasts.
func (r *Reporter) Report(snap *model.Snapshot, mesh *generation.Mesh, connected Connected) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &scan{Reporter: r, mesh: mesh, connected: connected}
	current := map[string]bool{}
	closed := failClosed{}
	defer setFailClosed(r.cfg.FailClosed, closed)
	checked := make(map[*model.AuthorizationPolicy][]authz.Problem, len(snap.Resources().AuthorizationPolicies))
	var problems []authz.Problem
	for _, ap := range snap.Resources().AuthorizationPolicies {
		ps, ok := s.checked[ap]
		if !ok {
			ps = authz.Check([]*model.AuthorizationPolicy{ap}, authz.Options{TrustDomain: s.cfg.TrustDomain, Flavor: authz.Envoy})
		}
		checked[ap] = ps
		problems = append(problems, ps...)
	}
	s.checked = checked
	for _, p := range problems {
		closed.addAuthz(p.Effect)
		msg := p.String()
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("authorization policy not enforced as written", "policy", p.Policy.Namespace+"/"+p.Policy.Name, "problem", msg)
		}
	}
	for _, p := range requestAuthnProblems(snap, s.cfg.JWKSRule) {
		closed.add("RequestAuthentication", "tokens_refused")
		msg := p.String()
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("request authentication not enforced as written", "policy", p.Policy.Namespace+"/"+p.Policy.Name, "problem", msg)
		}
	}
	for _, dr := range snap.Resources().DestinationRules {
		for _, problem := range originationProblems(dr, s.mesh.Envoy.Mesh) {
			if strings.Contains(problem, refusedNoEndpoints) {
				closed.add("DestinationRule", "tls_refused")
			}
			current[problem] = true
			if !s.reported[problem] {
				s.log.Warn("destination rule TLS not applied as written", "rule", dr.Namespace+"/"+dr.Name, "problem", problem)
			}
		}
	}
	s.reportGateways(snap, closed, current)
	// Rules for one host merge as Istio merges them (the selection every
	// generator reads); what that leaves unused is said once.
	for _, n := range snap.DestinationRuleMergeNotes() {
		msg := n.String()
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("destination rule merged with another", "rule", n.Rule.Namespace+"/"+n.Rule.Name, "problem", msg)
		}
	}
	s.reportMeshRoutes(snap, closed, current)
	s.reportTelemetries(snap, closed, current)
	s.reportSidecars(snap, closed, current)
	// A ServiceEntry host another service already has is not served.
	for _, n := range snap.ServiceEntryNotes() {
		closed.add("ServiceEntry", "host_taken")
		msg := n.String()
		current[msg] = true
		if !s.reported[msg] {
			s.log.Warn("service entry host not served", "entry", n.Entry.Namespace+"/"+n.Entry.Name, "problem", msg)
		}
	}
	s.reported = current
}

// requestAuthnProblems are the RequestAuthentication rules that fail
// closed whatever is fetched (a bad jwks or jwksUri); fetch failures are
// the key sets' to log.
func requestAuthnProblems(snap *model.Snapshot, rule keyfetch.URLRule) []reqauthn.Problem {
	var out []reqauthn.Problem
	for _, ra := range snap.Resources().RequestAuthentications {
		_, problems := reqauthn.Config([]*model.RequestAuthentication{ra}, allFetched{}, rule)
		out = append(out, problems...)
	}
	return out
}

// allFetched holds a key set for every source, as far as problems go.
type allFetched struct{}

func (allFetched) JWKS(keyfetch.JWKSSource) (string, bool) { return keyfetch.RejectAllJWKS, true }
