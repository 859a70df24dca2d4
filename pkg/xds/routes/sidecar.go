package routes

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// The sidecar side of the translation (Istio's
// BuildSidecarOutboundVirtualHosts and BuildDefaultHTTPOutboundRoute):
// which VirtualServices a sidecar sees and the route a service without
// one gets. The virtual hosts themselves, which depend on the names a
// client may give a service, are the sidecar generator's.

// MeshVirtualServices returns the VirtualServices bound to sidecars
// ("mesh": no gateways, or "mesh" listed) that a proxy of namespace ns
// sees through their exportTo, in Istio's order (private, then exported
// to ns by name, then public; oldest first within each), with their
// delegations expanded, and the problems of the rules left out.
func (o Options) MeshVirtualServices(snap *model.Snapshot, ns string) ([]*model.VirtualService, []Problem) {
	return o.MeshVirtualServicesWhere(snap, ns, nil)
}

// MeshVirtualServicesWhere is MeshVirtualServices of the VirtualServices
// keep accepts (nil: all). keep is asked before a VirtualService is
// checked or its delegations expanded, so that a proxy whose Sidecar
// imports a few of many checks and expands those few; the problems are
// those of the VirtualServices kept.
func (o Options) MeshVirtualServicesWhere(snap *model.Snapshot, ns string, keep func(*model.VirtualService) bool) ([]*model.VirtualService, []Problem) {
	bound := o.boundToWhere(snap, Mesh, ns, keep)
	if len(bound) == 0 {
		return nil, nil
	}
	var dmap delegates
	ds := func() delegates {
		if dmap == nil {
			dmap = delegatesOf(snap)
		}
		return dmap
	}
	var problems []Problem
	out := make([]*model.VirtualService, 0, len(bound))
	for _, vs := range bound {
		if len(vs.Spec.GetHosts()) == 0 {
			continue // a delegate: bound through its root alone
		}
		if reason := meshRefusal(vs); reason != "" {
			problems = append(problems, vsProblem(vs, "%s", reason))
			continue
		}
		expanded, dprobs := o.expand(snap, vs, ds)
		problems = append(problems, dprobs...)
		out = append(out, expanded)
	}
	return out, problems
}

// Hosts are vs's hosts as a sidecar matches them: lower-cased, short
// names resolved in vs's namespace.
func Hosts(snap *model.Snapshot, vs *model.VirtualService) []string {
	out := make([]string, 0, len(vs.Spec.GetHosts()))
	for _, h := range vs.Spec.GetHosts() {
		out = append(out, lower(fqdn(snap, h, vs.Namespace)))
	}
	return out
}

// ResolveHost is host h of a VirtualService of namespace ns as a sidecar
// matches it: lower-cased, a short name resolved in ns.
func ResolveHost(snap *model.Snapshot, h, ns string) string { return lower(fqdn(snap, h, ns)) }

// HostsMatch reports whether host names a and b ("*.example.com"
// wildcards allowed) have a name in common, as Istio's host.Name.Matches.
func HostsMatch(a, b string) bool { return matches(a, b) }

// Wildcarded reports whether h is a wildcard host ("*" or "*.suffix").
func Wildcarded(h string) bool { return wildcarded(h) }

// UsesSourceLabels reports whether some http match of a VirtualService
// of snap (roots and delegates alike) selects its clients by their
// labels: the routes a sidecar gets then depend on its labels.
func UsesSourceLabels(snap *model.Snapshot) bool {
	return slices.ContainsFunc(snap.Resources().VirtualServices, selectsClients)
}

// SelectClients reports whether some http match of vss (VirtualServices
// whose delegations are expanded, as MeshVirtualServices returns them)
// selects its clients by their labels: UsesSourceLabels of the
// VirtualServices a proxy sees.
func SelectClients(vss []*model.VirtualService) bool {
	return slices.ContainsFunc(vss, selectsClients)
}

// DefaultRoute is the route of a service's port that no VirtualService
// routes, as Istio's BuildDefaultHTTPOutboundRoute: every path to the
// service's cluster, no timeout (nor for gRPC's grpc-timeout), the
// mesh's default retry policy (Istio's default when it sets none) with
// the previous-hosts predicate whatever the load balancer, and the
// consistent hash of the DestinationRule the proxy sees for the service
// (its port-level setting first).
func (o Options) DefaultRoute(snap *model.Snapshot, hostname string, port uint32, proxy Proxy) *routev3.Route {
	portName := strconv.FormatUint(uint64(port), 10)
	action := &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: resource.ClusterName(hostname, "", port)},
		Timeout:          notimeout,
		MaxGrpcTimeout:   notimeout,
		RetryPolicy:      o.DefaultRetryPolicy(),
	}
	if hp := DefaultHashPolicy(snap, hostname, port, proxy); hp != nil {
		action.HashPolicy = []*routev3.RouteAction_HashPolicy{hp}
	}
	return &routev3.Route{
		Name:      "default",
		Match:     &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Decorator: &routev3.Decorator{Operation: hostname + ":" + portName + "/*"},
		Action:    &routev3.Route_Route{Route: action},
	}
}

// isMesh reports whether s is a sidecar's.
func (s Scope) isMesh() bool { return strings.EqualFold(s.Gateway, Mesh) }

// DefaultRetryPolicy is the retry policy of a route whose rule sets none:
// the mesh's defaultHttpRetryPolicy, else Istio's default (2 attempts on
// connect-failure, refused-stream, unavailable, cancelled and
// retriable-status-codes, another host each time, up to 5 host
// selections); nil when the mesh's policy has no attempts.
func (o Options) DefaultRetryPolicy() *routev3.RetryPolicy { return retryPolicy(o.DefaultRetry, false) }

// DefaultHashPolicy is the consistent-hash policy of the default route of
// hostname's port: that of the DestinationRule the proxy sees for the
// service (its port-level setting first); nil for none.
func DefaultHashPolicy(snap *model.Snapshot, hostname string, port uint32, proxy Proxy) *routev3.RouteAction_HashPolicy {
	if len(snap.Resources().DestinationRules) == 0 {
		return nil
	}
	dr := snap.DestinationRuleFor(hostname, proxy.Namespace, proxy.Labels)
	if dr == nil || dr.Spec == nil {
		return nil
	}
	tp := dr.Spec.GetTrafficPolicy()
	hash := tp.GetLoadBalancer().GetConsistentHash()
	for _, s := range tp.GetPortLevelSettings() {
		if s.GetPort().GetNumber() == port {
			if h := s.GetLoadBalancer().GetConsistentHash(); h != nil {
				hash = h
			}
			break
		}
	}
	return hashPolicyOf(hash)
}

// MeshProblems returns what of the VirtualServices bound to "mesh"
// sidecars do not get, and why: a VirtualService with a rule this
// translation refuses (left out whole, the services it names keep their
// default routes), a delegation that cannot be followed (the rule left
// out), and a host another VirtualService routes first (hostConflicts).
// The tls and tcp rules sidecars leave out are the sidecar generator's to
// find (envoygen's MeshL4Problems), which knows the ports' protocols.
func (o Options) MeshProblems(snap *model.Snapshot) []Problem {
	var problems []Problem
	var dmap delegates
	ds := func() delegates {
		if dmap == nil {
			dmap = delegatesOf(snap)
		}
		return dmap
	}
	rs := &regexes{}
	for _, vs := range snap.Resources().VirtualServices {
		if vs.Spec == nil || len(vs.Spec.GetHosts()) == 0 || !slices.Contains(gatewaysOf(vs), Mesh) {
			continue
		}
		if reason := meshRefusal(vs); reason != "" {
			problems = append(problems, vsProblem(vs, "left out of sidecars: %s", reason))
			continue
		}
		expanded, dprobs := o.expand(snap, vs, ds)
		problems = append(problems, dprobs...)
		if len(expanded.Spec.GetHttp()) > 0 {
			// In the form sidecars get them: routes that do not encode
			// leave the VirtualService out too (MemoWireRoutes).
			err := o.buildRoutes(snap, expanded, Scope{Port: 80, Gateway: Mesh, every: true}, rs, wireForm, false).err
			if err != nil && !errors.Is(err, ErrNoRoutes) {
				problems = append(problems, vsProblem(vs, "left out of sidecars: %v", err))
			}
		}
	}
	return append(problems, hostConflicts(snap)...)
}

// hostConflicts are the VirtualServices bound to "mesh" that name a host an
// earlier one (oldest first, then by name and namespace) also names: a
// sidecar that sees both takes the earlier one's routes for the host, as
// Istio does.
func hostConflicts(snap *model.Snapshot) []Problem {
	var bound []*model.VirtualService
	for _, vs := range snap.Resources().VirtualServices {
		if vs.Spec != nil && len(vs.Spec.GetHosts()) > 0 && slices.Contains(gatewaysOf(vs), Mesh) && meshRefusal(vs) == "" {
			bound = append(bound, vs)
		}
	}
	if len(bound) < 2 {
		return nil
	}
	slices.SortStableFunc(bound, func(a, b *model.VirtualService) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Namespace, b.Namespace))
	})
	first := map[string]*model.VirtualService{}
	var out []Problem
	for _, vs := range bound {
		for _, h := range Hosts(snap, vs) {
			if prev, ok := first[h]; ok && prev != vs {
				out = append(out, vsProblem(vs, "host %s is also routed by %s/%s: sidecars that see both take its routes", h, prev.Namespace, prev.Name))
				continue
			}
			first[h] = vs
		}
	}
	return out
}

// meshRefusal says why sidecars leave vs out whole, "" when they do not:
// a limit it passes (checkBounds), or a rule of policy.RefusedForSidecars.
func meshRefusal(vs *model.VirtualService) string {
	if reason := checkBounds(vs.Spec); reason != "" {
		return reason
	}
	return policy.RefusedForSidecars(vs.Spec)
}
