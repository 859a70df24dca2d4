package routes

import (
	"maps"
	"strings"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Delegation (Istio's pilot/pkg/model/virtualservice.go and
// virtualservice_controller.go): an http rule of a root VirtualService
// (one with hosts) may name, instead of destinations, a delegate
// VirtualService (one without hosts, of the root's namespace unless it
// names another, exported to the root's namespace). The delegate's rules
// take the rule's place, each match narrowed by the rule's (a delegate
// match that no root match contains is a conflict, and its rule is left
// out), each unset field taken from the rule.

// delegates are the VirtualServices without hosts by "ns/name".
type delegates map[string]*model.VirtualService

func delegatesOf(snap *model.Snapshot) delegates {
	out := delegates{}
	for _, vs := range snap.Resources().VirtualServices {
		if vs.Spec != nil && len(vs.Spec.GetHosts()) == 0 {
			out[vs.Namespace+"/"+vs.Name] = vs
		}
	}
	return out
}

// expand returns vs with its delegations merged, and the problems of the
// rules left out; vs itself when it delegates nothing.
func (o Options) expand(snap *model.Snapshot, vs *model.VirtualService, ds func() delegates) (*model.VirtualService, []Problem) {
	root := false
	for _, r := range vs.Spec.GetHttp() {
		root = root || r.GetDelegate() != nil
	}
	if !root {
		return vs, nil
	}
	var problems []Problem
	spec := proto.CloneOf(vs.Spec)
	var rules []*networkingv1.HTTPRoute
	for i, r := range spec.GetHttp() {
		d := r.GetDelegate()
		if d == nil {
			rules = append(rules, r)
			continue
		}
		ns := d.GetNamespace()
		if ns == "" {
			ns = vs.Namespace
		}
		dvs := ds()[ns+"/"+d.GetName()]
		if dvs == nil {
			problems = append(problems, vsProblem(vs, "http[%d]: delegate %s/%s not found; the rule is left out", i, ns, d.GetName()))
			continue
		}
		if visibility(dvs, vs.Namespace, o.DefaultExportTo) == 0 {
			problems = append(problems, vsProblem(vs, "http[%d]: delegate %s/%s is not exported to %s; the rule is left out", i, ns, d.GetName(), vs.Namespace))
			continue
		}
		if len(dvs.Spec.GetHttp()) > MaxHTTPRules || len(rules)+len(dvs.Spec.GetHttp()) > MaxHTTPRules {
			problems = append(problems, vsProblem(vs, "http[%d]: delegate %s/%s makes more than %d rules; the rule is left out", i, ns, d.GetName(), MaxHTTPRules))
			continue
		}
		for j, sub := range dvs.Spec.GetHttp() {
			merged, ok := mergeRule(r, resolvedIn(snap, sub, dvs.Namespace))
			if !ok {
				problems = append(problems, vsProblem(vs, "http[%d]: rule %d of delegate %s/%s has a match outside the rule's; it is left out", i, j, ns, d.GetName()))
				continue
			}
			rules = append(rules, merged)
		}
	}
	spec.Http = rules
	return &model.VirtualService{Meta: vs.Meta, Created: vs.Created, Spec: spec}, problems
}

// resolvedIn is a copy of rule with its destination and mirror hosts and
// its matches' gateways resolved in namespace ns (the delegate's), so that
// they keep their meaning in the root's.
func resolvedIn(snap *model.Snapshot, rule *networkingv1.HTTPRoute, ns string) *networkingv1.HTTPRoute {
	r := proto.CloneOf(rule)
	for _, m := range r.GetMatch() {
		for i, g := range m.GetGateways() {
			m.Gateways[i] = resolveGateway(g, ns)
		}
	}
	for _, d := range r.GetRoute() {
		if d.GetDestination() != nil {
			d.Destination.Host = fqdn(snap, d.Destination.GetHost(), ns)
		}
	}
	if r.GetMirror() != nil {
		r.Mirror.Host = fqdn(snap, r.Mirror.GetHost(), ns)
	}
	for _, m := range r.GetMirrors() {
		if m.GetDestination() != nil {
			m.Destination.Host = fqdn(snap, m.Destination.GetHost(), ns)
		}
	}
	return r
}

// mergeRule is the delegate's rule sub in the place of root's rule root
// (sub is a copy it may change); ok false when their matches conflict.
func mergeRule(root, sub *networkingv1.HTTPRoute) (*networkingv1.HTTPRoute, bool) {
	matches, ok := mergeMatches(root.GetMatch(), sub.GetMatch())
	if !ok {
		return nil, false
	}
	sub.Match = matches
	switch {
	case sub.GetName() == "":
		sub.Name = root.GetName()
	case root.GetName() != "":
		sub.Name = root.GetName() + "-" + sub.GetName()
	}
	if sub.Rewrite == nil {
		sub.Rewrite = root.GetRewrite()
	}
	if sub.DirectResponse == nil {
		sub.DirectResponse = root.GetDirectResponse()
	}
	if sub.Timeout == nil {
		sub.Timeout = root.GetTimeout()
	}
	if sub.Retries == nil {
		sub.Retries = root.GetRetries()
	}
	if sub.Fault == nil {
		sub.Fault = root.GetFault()
	}
	if sub.Mirror == nil {
		sub.Mirror = root.GetMirror()
	}
	//nolint:staticcheck // the deprecated field is inherited as Istio does
	if sub.MirrorPercent == nil {
		sub.MirrorPercent = root.GetMirrorPercent()
	}
	if sub.MirrorPercentage == nil {
		sub.MirrorPercentage = root.GetMirrorPercentage()
	}
	if sub.CorsPolicy == nil {
		sub.CorsPolicy = root.GetCorsPolicy()
	}
	if sub.Mirrors == nil {
		sub.Mirrors = root.GetMirrors()
	}
	if sub.Headers == nil {
		sub.Headers = root.GetHeaders()
	}
	return sub, true
}

// mergeMatches narrows each delegate match by every root match it does
// not conflict with; ok false when one fits none.
func mergeMatches(root, sub []*networkingv1.HTTPMatchRequest) ([]*networkingv1.HTTPMatchRequest, bool) {
	if len(root) == 0 {
		return sub, true
	}
	if len(sub) == 0 {
		return root, true
	}
	var out []*networkingv1.HTTPMatchRequest
	for _, s := range sub {
		found := false
		for _, r := range root {
			if conflicts(r, s) {
				continue
			}
			out = append(out, mergeMatch(r, s))
			found = true
		}
		if !found {
			return nil, false
		}
	}
	return out, len(out) > 0
}

func mergeMatch(root, sub *networkingv1.HTTPMatchRequest) *networkingv1.HTTPMatchRequest {
	out := proto.CloneOf(sub)
	switch {
	case out.GetName() == "":
		out.Name = root.GetName()
	case root.GetName() != "":
		out.Name = root.GetName() + "-" + out.GetName()
	}
	if out.Uri == nil {
		out.Uri = root.GetUri()
	}
	if out.Scheme == nil {
		out.Scheme = root.GetScheme()
	}
	if out.Method == nil {
		out.Method = root.GetMethod()
	}
	if out.Authority == nil {
		out.Authority = root.GetAuthority()
	}
	out.Headers = mergeMaps(root.GetHeaders(), sub.GetHeaders())
	out.WithoutHeaders = mergeMaps(root.GetWithoutHeaders(), sub.GetWithoutHeaders())
	out.QueryParams = mergeMaps(root.GetQueryParams(), sub.GetQueryParams())
	if out.Port == 0 {
		out.Port = root.GetPort()
	}
	out.SourceLabels = mergeMaps(root.GetSourceLabels(), sub.GetSourceLabels())
	if out.SourceNamespace == "" {
		out.SourceNamespace = root.GetSourceNamespace()
	}
	if len(out.Gateways) == 0 {
		out.Gateways = root.GetGateways()
	}
	if out.StatPrefix == "" {
		out.StatPrefix = root.GetStatPrefix()
	}
	return out
}

// mergeMaps is a copy of a with b's entries over it.
func mergeMaps[V any](a, b map[string]V) map[string]V {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]V{}
	}
	maps.Copy(out, b)
	return out
}

// conflicts reports whether delegate match leaf may match a request root
// does not (Istio's hasConflict).
func conflicts(root, leaf *networkingv1.HTTPMatchRequest) bool {
	pairs := [][2]*networkingv1.StringMatch{
		{root.GetUri(), leaf.GetUri()}, {root.GetScheme(), leaf.GetScheme()},
		{root.GetMethod(), leaf.GetMethod()}, {root.GetAuthority(), leaf.GetAuthority()},
	}
	for _, p := range pairs {
		if stringConflict(p[0], p[1]) {
			return true
		}
	}
	for k, v := range leaf.GetHeaders() {
		if stringConflict(root.GetHeaders()[k], v) {
			return true
		}
	}
	for k, v := range leaf.GetWithoutHeaders() {
		if stringConflict(root.GetWithoutHeaders()[k], v) {
			return true
		}
	}
	for k, v := range leaf.GetQueryParams() {
		if stringConflict(root.GetQueryParams()[k], v) {
			return true
		}
	}
	if root.GetIgnoreUriCase() != leaf.GetIgnoreUriCase() {
		return true
	}
	if root.GetPort() > 0 && leaf.GetPort() > 0 && root.GetPort() != leaf.GetPort() {
		return true
	}
	if root.GetSourceNamespace() != "" && leaf.GetSourceNamespace() != root.GetSourceNamespace() {
		return true
	}
	for k, v := range leaf.GetSourceLabels() {
		if rv, ok := root.GetSourceLabels()[k]; ok && rv != v {
			return true
		}
	}
	if len(root.GetGateways()) > 0 && len(leaf.GetGateways()) > 0 {
		if len(root.GetGateways()) < len(leaf.GetGateways()) {
			return true
		}
		for _, g := range leaf.GetGateways() {
			found := false
			for _, rg := range root.GetGateways() {
				found = found || rg == g
			}
			if !found {
				return true
			}
		}
	}
	return false
}

// stringConflict is Istio's stringMatchConflict: whether leaf may match
// what root does not.
func stringConflict(root, leaf *networkingv1.StringMatch) bool {
	if root == nil || leaf == nil {
		return false
	}
	if root.GetRegex() != "" && (leaf.GetRegex() != "" || leaf.GetPrefix() != "" || leaf.GetExact() != "") {
		return true
	}
	if leaf.GetRegex() != "" && (root.GetRegex() != "" || root.GetPrefix() != "" || root.GetExact() != "") {
		return true
	}
	if exact := root.GetExact(); exact != "" {
		return leaf.GetPrefix() != "" || leaf.GetExact() != exact
	}
	if prefix := root.GetPrefix(); prefix != "" {
		if leaf.GetPrefix() != "" {
			return !strings.HasPrefix(leaf.GetPrefix(), prefix)
		}
		if leaf.GetExact() != "" {
			return !strings.HasPrefix(leaf.GetExact(), prefix)
		}
	}
	return true
}
