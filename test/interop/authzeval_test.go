package interop

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	uritemplate "github.com/envoyproxy/go-control-plane/envoy/extensions/path/match/uri_template/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// rbacRequest is a request (or, on a TCP chain, a connection) as Envoy's
// RBAC filter sees it: after the connection manager has normalized the
// path, so path is what RBAC matches, whatever the client sent.
type rbacRequest struct {
	id      string // the peer's verified URI SAN; empty for a plaintext peer
	src     string // the connection's peer address (source.ip, ipBlocks)
	remote  string // the original client address (remote.ip, remoteIpBlocks)
	dst     string
	port    uint32
	sni     string
	method  string
	path    string
	host    string // :authority
	headers map[string]string
}

func (r rbacRequest) String() string {
	id := r.id
	if id == "" {
		id = "plaintext"
	}
	return fmt.Sprintf("%s src=%s remote=%s dst=%s:%d sni=%q %s %s host=%q headers=%v",
		id, r.src, r.remote, r.dst, r.port, r.sni, r.method, r.path, r.host, r.headers)
}

// rbacEvaluator decides requests as Envoy's RBAC filters do. A matcher it
// does not know, a field of a known matcher that it does not evaluate, or
// an HTTP matcher on a TCP chain fails the test instead of guessing.
type rbacEvaluator struct {
	t       testing.TB
	tcp     bool
	regexes map[string]*regexp.Regexp
}

func newRBACEvaluator(t testing.TB, tcp bool) *rbacEvaluator {
	return &rbacEvaluator{t: t, tcp: tcp, regexes: map[string]*regexp.Regexp{}}
}

// allowed runs the filters in order: a DENY filter with a matching policy
// denies, an ALLOW filter without one denies, LOG never decides. A filter
// without rules enforces nothing.
func (e *rbacEvaluator) allowed(filters []*rbacpb.RBAC, r rbacRequest) bool {
	for _, f := range filters {
		if f == nil {
			continue
		}
		matched := false
		for _, p := range f.GetPolicies() {
			if e.policy(p, r) {
				matched = true
				break
			}
		}
		switch f.GetAction() {
		case rbacpb.RBAC_DENY:
			if matched {
				return false
			}
		case rbacpb.RBAC_ALLOW:
			if !matched {
				return false
			}
		case rbacpb.RBAC_LOG:
		default:
			e.t.Fatalf("RBAC action the evaluator does not know: %v", f.GetAction())
		}
	}
	return true
}

// policy matches when any permission and any principal match.
func (e *rbacEvaluator) policy(p *rbacpb.Policy, r rbacRequest) bool {
	if p.GetCondition() != nil || p.GetCheckedCondition() != nil {
		e.t.Fatalf("policy with a CEL condition: %v", p)
	}
	perm, prin := false, false
	for _, x := range p.GetPermissions() {
		if e.permission(x, r) {
			perm = true
			break
		}
	}
	for _, x := range p.GetPrincipals() {
		if e.principal(x, r) {
			prin = true
			break
		}
	}
	return perm && prin
}

func (e *rbacEvaluator) principal(p *rbacpb.Principal, r rbacRequest) bool {
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_Any:
		return id.Any
	case *rbacpb.Principal_NotId:
		return !e.principal(id.NotId, r)
	case *rbacpb.Principal_AndIds:
		for _, x := range id.AndIds.GetIds() {
			if !e.principal(x, r) {
				return false
			}
		}
		return true
	case *rbacpb.Principal_OrIds:
		for _, x := range id.OrIds.GetIds() {
			if e.principal(x, r) {
				return true
			}
		}
		return false
	case *rbacpb.Principal_Authenticated_:
		// Envoy matches the URI SAN of a verified peer certificate; a
		// plaintext peer is not authenticated.
		if r.id == "" {
			return false
		}
		m := id.Authenticated.GetPrincipalName()
		return m == nil || e.str(m, r.id)
	case *rbacpb.Principal_DirectRemoteIp:
		return e.inCIDR(id.DirectRemoteIp, r.src)
	case *rbacpb.Principal_RemoteIp:
		return e.inCIDR(id.RemoteIp, r.remote)
	case *rbacpb.Principal_SourceIp: //nolint:staticcheck // deprecated, but what older output used
		return e.inCIDR(id.SourceIp, r.src) //nolint:staticcheck
	case *rbacpb.Principal_Header:
		return e.header(id.Header, r)
	}
	e.t.Fatalf("principal the evaluator does not know: %v", p)
	return false
}

func (e *rbacEvaluator) permission(p *rbacpb.Permission, r rbacRequest) bool {
	switch rule := p.GetRule().(type) {
	case *rbacpb.Permission_Any:
		return rule.Any
	case *rbacpb.Permission_NotRule:
		return !e.permission(rule.NotRule, r)
	case *rbacpb.Permission_AndRules:
		for _, x := range rule.AndRules.GetRules() {
			if !e.permission(x, r) {
				return false
			}
		}
		return true
	case *rbacpb.Permission_OrRules:
		for _, x := range rule.OrRules.GetRules() {
			if e.permission(x, r) {
				return true
			}
		}
		return false
	case *rbacpb.Permission_DestinationPort:
		return rule.DestinationPort == r.port
	case *rbacpb.Permission_DestinationPortRange:
		return int64(r.port) >= int64(rule.DestinationPortRange.GetStart()) && int64(r.port) < int64(rule.DestinationPortRange.GetEnd())
	case *rbacpb.Permission_DestinationIp:
		return e.inCIDR(rule.DestinationIp, r.dst)
	case *rbacpb.Permission_RequestedServerName:
		return e.str(rule.RequestedServerName, r.sni)
	case *rbacpb.Permission_Header:
		return e.header(rule.Header, r)
	case *rbacpb.Permission_UrlPath:
		e.httpOnly(p)
		if rule.UrlPath.GetPath() == nil {
			e.t.Fatalf("path matcher without a string matcher: %v", p)
		}
		// url_path is the path without query and fragment.
		path, _, _ := strings.Cut(r.path, "?")
		path, _, _ = strings.Cut(path, "#")
		return e.str(rule.UrlPath.GetPath(), path)
	case *rbacpb.Permission_UriTemplate:
		e.httpOnly(p)
		var cfg uritemplate.UriTemplateMatchConfig
		if err := rule.UriTemplate.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			e.t.Fatalf("uri_template config: %v", err)
		}
		path, _, _ := strings.Cut(r.path, "?")
		path, _, _ = strings.Cut(path, "#")
		return e.regex(templateRegex(cfg.GetPathTemplate())).MatchString(path)
	}
	e.t.Fatalf("permission the evaluator does not know: %v", p)
	return false
}

func (e *rbacEvaluator) httpOnly(x any) {
	if e.tcp {
		e.t.Fatalf("HTTP matcher on a TCP chain: %v", x)
	}
}

// header matches as Envoy's HeaderMatcher: :method, :path (with query) and
// :authority are headers too.
func (e *rbacEvaluator) header(h *route.HeaderMatcher, r rbacRequest) bool {
	e.httpOnly(h)
	if h.GetInvertMatch() || h.GetTreatMissingHeaderAsEmpty() {
		e.t.Fatalf("header matcher with invert_match or treat_missing_header_as_empty: %v", h)
	}
	headers := map[string]string{":method": r.method, ":path": r.path, ":authority": r.host}
	for k, v := range r.headers {
		headers[strings.ToLower(k)] = v
	}
	v, ok := headers[strings.ToLower(h.GetName())]
	switch m := h.GetHeaderMatchSpecifier().(type) {
	case *route.HeaderMatcher_PresentMatch:
		return ok == m.PresentMatch
	case *route.HeaderMatcher_StringMatch:
		return ok && e.str(m.StringMatch, v)
	}
	e.t.Fatalf("header matcher the evaluator does not know: %v", h)
	return false
}

// str is Envoy's StringMatcher; ignore_case has no effect on safe_regex.
func (e *rbacEvaluator) str(m *matcher.StringMatcher, s string) bool {
	fold := func(x string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(x)
		}
		return x
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
		return fold(s) == fold(p.Exact)
	case *matcher.StringMatcher_Prefix:
		return strings.HasPrefix(fold(s), fold(p.Prefix))
	case *matcher.StringMatcher_Suffix:
		return strings.HasSuffix(fold(s), fold(p.Suffix))
	case *matcher.StringMatcher_Contains:
		return strings.Contains(fold(s), fold(p.Contains))
	case *matcher.StringMatcher_SafeRegex:
		// Envoy's safe_regex is RE2 and must match the whole value.
		return e.regex("^(?:" + p.SafeRegex.GetRegex() + ")$").MatchString(s)
	}
	e.t.Fatalf("string matcher the evaluator does not know: %v", m)
	return false
}

func (e *rbacEvaluator) regex(expr string) *regexp.Regexp {
	if re, ok := e.regexes[expr]; ok {
		return re
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		e.t.Fatalf("bad regex %q: %v", expr, err)
	}
	e.regexes[expr] = re
	return re
}

func (e *rbacEvaluator) inCIDR(c *core.CidrRange, ip string) bool {
	p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", c.GetAddressPrefix(), c.GetPrefixLen().GetValue()))
	if err != nil {
		e.t.Fatalf("bad CIDR %v: %v", c, err)
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		e.t.Fatalf("bad request address %q: %v", ip, err)
	}
	return p.Masked().Contains(addr)
}

// templateRegex is Envoy's reading of a path template: "*" one segment,
// "**" any number of them (including none).
func templateRegex(tmpl string) string {
	const lit = `a-zA-Z0-9\-._~%!$&'()+,;:@=`
	segs := strings.Split(strings.TrimPrefix(tmpl, "/"), "/")
	for i, s := range segs {
		switch s {
		case "*":
			segs[i] = "[" + lit + "]+"
		case "**":
			segs[i] = "[" + lit + "/]*"
		default:
			segs[i] = regexp.QuoteMeta(s)
		}
	}
	return "^/" + strings.Join(segs, "/") + "$"
}
