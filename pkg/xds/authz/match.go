package authz

import (
	"regexp"
	"strings"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// A piece is part of a regular expression. There are two kinds: literal
// text, which is quoted and so matches only itself, and the fragments
// below, the only regular-expression syntax this package writes. Policy
// text is always a literal.
type piece interface{ regex() string }

type literal string

func (l literal) regex() string { return regexp.QuoteMeta(string(l)) }

type fragment string

func (f fragment) regex() string { return string(f) }

const (
	anyText      fragment = ".*"
	someText     fragment = ".+"
	segmentText  fragment = "[^/]*"
	optionalPath fragment = "(.+/|)"
	optionalTail fragment = "(/.+)?"
)

// safeRegex is the only constructor of a regular-expression matcher.
func safeRegex(pieces ...piece) *matcher.StringMatcher {
	var b strings.Builder
	for _, p := range pieces {
		b.WriteString(p.regex())
	}
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{
		SafeRegex: &matcher.RegexMatcher{Regex: b.String()},
	}}
}

func exact(s string, ignoreCase bool) *matcher.StringMatcher {
	return &matcher.StringMatcher{IgnoreCase: ignoreCase, MatchPattern: &matcher.StringMatcher_Exact{Exact: s}}
}

func prefix(s string, ignoreCase bool) *matcher.StringMatcher {
	return &matcher.StringMatcher{IgnoreCase: ignoreCase, MatchPattern: &matcher.StringMatcher_Prefix{Prefix: s}}
}

func suffix(s string, ignoreCase bool) *matcher.StringMatcher {
	return &matcher.StringMatcher{IgnoreCase: ignoreCase, MatchPattern: &matcher.StringMatcher_Suffix{Suffix: s}}
}

func contains(s string) *matcher.StringMatcher {
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Contains{Contains: s}}
}

// wildcard is Istio's string form: "*" is any non-empty value, "*x" a
// suffix, "x*" a prefix, anything else exact.
func wildcard(v string) *matcher.StringMatcher {
	switch {
	case v == "*":
		return safeRegex(someText)
	case strings.HasPrefix(v, "*"):
		return suffix(v[1:], false)
	case strings.HasSuffix(v, "*"):
		return prefix(v[:len(v)-1], false)
	}
	return exact(v, false)
}

// spiffeWildcard is wildcard for a value written without the "spiffe://"
// that the peer's URI SAN starts with.
func spiffeWildcard(v string) *matcher.StringMatcher {
	const scheme = "spiffe://"
	switch {
	case v == "*":
		return safeRegex(someText)
	case strings.HasPrefix(v, "*"):
		return safeRegex(literal(scheme), anyText, literal(v[1:]))
	case strings.HasSuffix(v, "*"):
		return prefix(scheme+v[:len(v)-1], false)
	}
	return exact(scheme+v, false)
}

// headerMatch is Istio's header form: "*" is presence, "*x" a suffix,
// "x*" a prefix, anything else exact.
func headerMatch(name, v string, ignoreCase bool) *route.HeaderMatcher {
	h := &route.HeaderMatcher{Name: name}
	switch {
	case v == "*":
		h.HeaderMatchSpecifier = &route.HeaderMatcher_PresentMatch{PresentMatch: true}
		return h
	case strings.HasPrefix(v, "*"):
		h.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: suffix(v[1:], ignoreCase)}
	case strings.HasSuffix(v, "*"):
		h.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: prefix(v[:len(v)-1], ignoreCase)}
	default:
		h.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: exact(v, ignoreCase)}
	}
	return h
}

// authenticated matches a peer whose verified certificate names match m;
// a nil m matches any peer that presented a verified certificate.
func authenticated(m *matcher.StringMatcher) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Authenticated_{
		Authenticated: &rbacpb.Principal_Authenticated{PrincipalName: m},
	}}
}

// noIdentity matches a peer without a verified certificate.
func noIdentity() *rbacpb.Principal { return notPrincipal(authenticated(nil)) }

func anyPrincipal() *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Any{Any: true}}
}

func anyPermission() *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Any{Any: true}}
}

func notPrincipal(p *rbacpb.Principal) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_NotId{NotId: p}}
}

func notPermission(p *rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_NotRule{NotRule: p}}
}

// The set constructors need at least one member (Envoy requires it) and
// leave a single member unwrapped.

func orPrincipals(ps []*rbacpb.Principal) *rbacpb.Principal {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_OrIds{OrIds: &rbacpb.Principal_Set{Ids: ps}}}
}

func andPrincipals(ps []*rbacpb.Principal) *rbacpb.Principal {
	switch len(ps) {
	case 0:
		return anyPrincipal()
	case 1:
		return ps[0]
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_AndIds{AndIds: &rbacpb.Principal_Set{Ids: ps}}}
}

func orPermissions(ps []*rbacpb.Permission) *rbacpb.Permission {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_OrRules{OrRules: &rbacpb.Permission_Set{Rules: ps}}}
}

func andPermissions(ps []*rbacpb.Permission) *rbacpb.Permission {
	switch len(ps) {
	case 0:
		return anyPermission()
	case 1:
		return ps[0]
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: ps}}}
}

// matchNever is Istio's policy for an ALLOW or DENY policy without rules:
// it matches no request.
func matchNever() *rbacpb.Policy {
	return &rbacpb.Policy{
		Permissions: []*rbacpb.Permission{notPermission(anyPermission())},
		Principals:  []*rbacpb.Principal{notPrincipal(anyPrincipal())},
	}
}

// matchAlways matches every request.
func matchAlways() *rbacpb.Policy {
	return &rbacpb.Policy{
		Permissions: []*rbacpb.Permission{anyPermission()},
		Principals:  []*rbacpb.Principal{anyPrincipal()},
	}
}
