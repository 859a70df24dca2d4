package grpcgen

import (
	"fmt"
	"strconv"
	"strings"

	rbacconfig "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	securityv1 "istio.io/api/security/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// The RBAC filters' names, Istio's: gRPC refuses a listener whose HTTP
// filters share a name, so the DENY filter has its own.
const (
	rbacFilterName     = "envoy.filters.http.rbac"
	rbacDenyFilterName = "envoy.filters.http.rbac.DENY"
)

// rbacFilters translates AuthorizationPolicies into a DENY filter and an
// ALLOW filter, in that order. No ALLOW policy means no ALLOW filter; an
// ALLOW policy without rules allows nothing. Every identity comparison is
// an exact, prefix or suffix string match on the peer's SPIFFE ID: no
// regular expression is ever built from policy text.
//
// Fields gRPC cannot evaluate fail closed: an ALLOW rule using one is
// dropped (it allows nothing); in a DENY rule the field is ignored (the rule
// denies more). A DENY condition on the source identity also matches
// callers without any authenticated identity, so that a plaintext caller
// cannot pass a DENY by presenting no identity. CUSTOM policies, which gRPC
// cannot call out for, deny everything.
func (g *Generator) rbacFilters(policies []*model.AuthorizationPolicy) ([]*hcm.HttpFilter, error) {
	deny := &rbacconfig.RBAC{Action: rbacconfig.RBAC_DENY, Policies: map[string]*rbacconfig.Policy{}}
	allow := &rbacconfig.RBAC{Action: rbacconfig.RBAC_ALLOW, Policies: map[string]*rbacconfig.Policy{}}
	hasAllow := false
	for _, p := range policies {
		base := p.Namespace + "/" + p.Name
		switch p.Spec.GetAction() {
		case securityv1.AuthorizationPolicy_ALLOW:
			hasAllow = true
			for i, r := range p.Spec.GetRules() {
				if pol, ok := g.rulePolicy(r, false); ok {
					allow.Policies[base+"["+strconv.Itoa(i)+"]"] = pol
				}
			}
		case securityv1.AuthorizationPolicy_DENY:
			for i, r := range p.Spec.GetRules() {
				if pol, ok := g.rulePolicy(r, true); ok {
					deny.Policies[base+"["+strconv.Itoa(i)+"]"] = pol
				}
			}
		case securityv1.AuthorizationPolicy_CUSTOM:
			deny.Policies[base+"[custom]"] = &rbacconfig.Policy{
				Permissions: []*rbacconfig.Permission{anyPermission()},
				Principals:  []*rbacconfig.Principal{anyPrincipal()},
			}
		}
	}
	var out []*hcm.HttpFilter
	if len(deny.Policies) > 0 {
		f, err := rbacFilter(rbacDenyFilterName, deny)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if hasAllow {
		f, err := rbacFilter(rbacFilterName, allow)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func rbacFilter(name string, r *rbacconfig.RBAC) (*hcm.HttpFilter, error) {
	a, err := anypb.New(&rbacfilter.RBAC{Rules: r})
	if err != nil {
		return nil, fmt.Errorf("rbac filter: %w", err)
	}
	return &hcm.HttpFilter{Name: name, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}}, nil
}

// rulePolicy translates one rule; ok is false when the rule must be left
// out (an ALLOW rule using an unsupported field).
func (g *Generator) rulePolicy(r *securityv1.Rule, isDeny bool) (*rbacconfig.Policy, bool) {
	if len(r.GetWhen()) > 0 && !isDeny {
		return nil, false
	}
	pol := &rbacconfig.Policy{}
	for _, from := range r.GetFrom() {
		p, ok := g.sourcePrincipal(from.GetSource(), isDeny)
		if !ok {
			return nil, false
		}
		pol.Principals = append(pol.Principals, p)
	}
	for _, to := range r.GetTo() {
		p, ok := operationPermission(to.GetOperation(), isDeny)
		if !ok {
			return nil, false
		}
		pol.Permissions = append(pol.Permissions, p)
	}
	if len(pol.Principals) == 0 {
		pol.Principals = []*rbacconfig.Principal{anyPrincipal()}
	}
	if len(pol.Permissions) == 0 {
		pol.Permissions = []*rbacconfig.Permission{anyPermission()}
	}
	return pol, true
}

func (g *Generator) sourcePrincipal(s *securityv1.Source, isDeny bool) (*rbacconfig.Principal, bool) {
	unsupported := len(s.GetRequestPrincipals()) + len(s.GetNotRequestPrincipals()) + len(s.GetIpBlocks()) +
		len(s.GetNotIpBlocks()) + len(s.GetRemoteIpBlocks()) + len(s.GetNotRemoteIpBlocks()) +
		len(s.GetTrustDomains()) + len(s.GetNotTrustDomains())
	if unsupported > 0 && !isDeny {
		return nil, false
	}
	var and []*rbacconfig.Principal
	identity := func(ids []*rbacconfig.Principal) {
		p := orPrincipals(ids)
		if isDeny {
			// No authenticated identity cannot prove it is not the one denied.
			p = orPrincipals([]*rbacconfig.Principal{p, notPrincipal(authenticated(nil))})
		}
		and = append(and, p)
	}
	if v := s.GetPrincipals(); len(v) > 0 {
		identity(principalMatchers(v, "spiffe://"))
	}
	if v := s.GetNotPrincipals(); len(v) > 0 {
		and = append(and, notPrincipal(orPrincipals(principalMatchers(v, "spiffe://"))))
	}
	if v := s.GetNamespaces(); len(v) > 0 {
		identity(g.namespaceMatchers(v))
	}
	if v := s.GetNotNamespaces(); len(v) > 0 {
		and = append(and, notPrincipal(orPrincipals(g.namespaceMatchers(v))))
	}
	if v := s.GetServiceAccounts(); len(v) > 0 {
		identity(g.serviceAccountMatchers(v))
	}
	if v := s.GetNotServiceAccounts(); len(v) > 0 {
		and = append(and, notPrincipal(orPrincipals(g.serviceAccountMatchers(v))))
	}
	switch len(and) {
	case 0:
		return anyPrincipal(), true
	case 1:
		return and[0], true
	}
	return &rbacconfig.Principal{Identifier: &rbacconfig.Principal_AndIds{AndIds: &rbacconfig.Principal_Set{Ids: and}}}, true
}

// principalMatchers matches Istio principals ("<td>/ns/<ns>/sa/<sa>") with
// "*" allowed only as the whole value, a prefix or a suffix.
func principalMatchers(values []string, prefix string) []*rbacconfig.Principal {
	out := make([]*rbacconfig.Principal, 0, len(values))
	for _, v := range values {
		out = append(out, authenticated(stringMatch(v, prefix)))
	}
	return out
}

// namespaceMatchers matches the SPIFFE IDs of a namespace of our trust
// domain by prefix "spiffe://<td>/ns/<ns>/sa/".
func (g *Generator) namespaceMatchers(values []string) []*rbacconfig.Principal {
	out := make([]*rbacconfig.Principal, 0, len(values))
	for _, ns := range values {
		if ns == "*" {
			out = append(out, authenticated(nil))
			continue
		}
		out = append(out, authenticated(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{
			Prefix: "spiffe://" + g.TrustDomain.Name() + "/ns/" + ns + "/sa/",
		}}))
	}
	return out
}

// serviceAccountMatchers matches "<ns>/<sa>" exactly.
func (g *Generator) serviceAccountMatchers(values []string) []*rbacconfig.Principal {
	out := make([]*rbacconfig.Principal, 0, len(values))
	for _, v := range values {
		ns, sa, _ := strings.Cut(v, "/")
		out = append(out, authenticated(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{
			Exact: "spiffe://" + g.TrustDomain.Name() + "/ns/" + ns + "/sa/" + sa,
		}}))
	}
	return out
}

// stringMatch: "*" is nil (any authenticated identity), "x*" a prefix, "*x"
// a suffix, anything else exact; prefix is prepended to the pattern.
func stringMatch(v, prefix string) *matcher.StringMatcher {
	switch {
	case v == "*":
		return nil
	case strings.HasSuffix(v, "*"):
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: prefix + strings.TrimSuffix(v, "*")}}
	case strings.HasPrefix(v, "*"):
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: strings.TrimPrefix(v, "*")}}
	}
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: prefix + v}}
}

func operationPermission(op *securityv1.Operation, isDeny bool) (*rbacconfig.Permission, bool) {
	if (len(op.GetHosts())+len(op.GetNotHosts()) > 0) && !isDeny {
		return nil, false
	}
	var and []*rbacconfig.Permission
	if v := op.GetPorts(); len(v) > 0 {
		p, ok := portPermissions(v)
		if !ok {
			return nil, false
		}
		and = append(and, p)
	}
	if v := op.GetNotPorts(); len(v) > 0 {
		p, ok := portPermissions(v)
		if !ok {
			return nil, false
		}
		and = append(and, notPermission(p))
	}
	if v := op.GetMethods(); len(v) > 0 {
		and = append(and, methodPermissions(v))
	}
	if v := op.GetNotMethods(); len(v) > 0 {
		and = append(and, notPermission(methodPermissions(v)))
	}
	if v := op.GetPaths(); len(v) > 0 {
		and = append(and, pathPermissions(v))
	}
	if v := op.GetNotPaths(); len(v) > 0 {
		and = append(and, notPermission(pathPermissions(v)))
	}
	switch len(and) {
	case 0:
		return anyPermission(), true
	case 1:
		return and[0], true
	}
	return &rbacconfig.Permission{Rule: &rbacconfig.Permission_AndRules{AndRules: &rbacconfig.Permission_Set{Rules: and}}}, true
}

func portPermissions(ports []string) (*rbacconfig.Permission, bool) {
	var or []*rbacconfig.Permission
	for _, s := range ports {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			return nil, false
		}
		or = append(or, &rbacconfig.Permission{Rule: &rbacconfig.Permission_DestinationPort{DestinationPort: uint32(n)}})
	}
	return orPermissions(or), true
}

func methodPermissions(methods []string) *rbacconfig.Permission {
	var or []*rbacconfig.Permission
	for _, m := range methods {
		if m == "*" {
			return anyPermission()
		}
		or = append(or, &rbacconfig.Permission{Rule: &rbacconfig.Permission_Header{Header: &route.HeaderMatcher{
			Name: ":method",
			HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
				MatchPattern: &matcher.StringMatcher_Exact{Exact: m},
			}},
		}}})
	}
	return orPermissions(or)
}

func pathPermissions(paths []string) *rbacconfig.Permission {
	var or []*rbacconfig.Permission
	for _, p := range paths {
		m := stringMatch(p, "")
		if m == nil {
			return anyPermission()
		}
		or = append(or, &rbacconfig.Permission{Rule: &rbacconfig.Permission_UrlPath{UrlPath: &matcher.PathMatcher{
			Rule: &matcher.PathMatcher_Path{Path: m},
		}}})
	}
	return orPermissions(or)
}

func authenticated(m *matcher.StringMatcher) *rbacconfig.Principal {
	return &rbacconfig.Principal{Identifier: &rbacconfig.Principal_Authenticated_{
		Authenticated: &rbacconfig.Principal_Authenticated{PrincipalName: m},
	}}
}

func anyPrincipal() *rbacconfig.Principal {
	return &rbacconfig.Principal{Identifier: &rbacconfig.Principal_Any{Any: true}}
}

func anyPermission() *rbacconfig.Permission {
	return &rbacconfig.Permission{Rule: &rbacconfig.Permission_Any{Any: true}}
}

func notPrincipal(p *rbacconfig.Principal) *rbacconfig.Principal {
	return &rbacconfig.Principal{Identifier: &rbacconfig.Principal_NotId{NotId: p}}
}

func notPermission(p *rbacconfig.Permission) *rbacconfig.Permission {
	return &rbacconfig.Permission{Rule: &rbacconfig.Permission_NotRule{NotRule: p}}
}

func orPrincipals(ps []*rbacconfig.Principal) *rbacconfig.Principal {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacconfig.Principal{Identifier: &rbacconfig.Principal_OrIds{OrIds: &rbacconfig.Principal_Set{Ids: ps}}}
}

func orPermissions(ps []*rbacconfig.Permission) *rbacconfig.Permission {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacconfig.Permission{Rule: &rbacconfig.Permission_OrRules{OrRules: &rbacconfig.Permission_Set{Rules: ps}}}
}
