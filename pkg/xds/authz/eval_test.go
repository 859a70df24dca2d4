package authz

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	uritemplate "github.com/envoyproxy/go-control-plane/envoy/extensions/path/match/uri_template/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// req is a request (or connection) as RBAC sees it. Zero fields take the
// defaults of withDefaults.
type req struct {
	id       string // the peer's verified URI SAN; empty for plaintext
	src      string // the connection's peer address
	remote   string // the original client address (x-forwarded-for)
	dst      string
	port     uint32
	sni      string
	method   string
	path     string
	host     string
	headers  map[string]string
	metadata map[string]map[string]any // filter → key → string or []string
}

func (r req) withDefaults() req {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&r.src, "10.0.0.9")
	def(&r.remote, r.src)
	def(&r.dst, "10.0.0.2")
	def(&r.method, "GET")
	def(&r.path, "/")
	def(&r.host, "echo.app")
	if r.port == 0 {
		r.port = 8080
	}
	return r
}

// evaluator decides requests as the data plane would: Envoy, or gRPC-Go
// (A41: no SNI, remote_ip is the peer address, metadata never matches).
// A matcher the data plane does not know, or an HTTP matcher on a TCP
// chain, fails the test.
type evaluator struct {
	t    *testing.T
	grpc bool
	tcp  bool
	r    req
}

// allowed runs the filters in order: a matching DENY policy denies, an
// ALLOW filter without a matching policy denies, LOG only logs.
func (e evaluator) allowed(filters []*rbacpb.RBAC) bool {
	for _, f := range filters {
		matched := false
		for _, p := range f.GetPolicies() {
			if e.policy(p) {
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
		}
	}
	return true
}

func (e evaluator) policy(p *rbacpb.Policy) bool {
	perm, prin := false, false
	for _, x := range p.GetPermissions() {
		perm = perm || e.permission(x)
	}
	for _, x := range p.GetPrincipals() {
		prin = prin || e.principal(x)
	}
	return perm && prin
}

func (e evaluator) principal(p *rbacpb.Principal) bool {
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_Any:
		return true
	case *rbacpb.Principal_NotId:
		return !e.principal(id.NotId)
	case *rbacpb.Principal_AndIds:
		for _, x := range id.AndIds.GetIds() {
			if !e.principal(x) {
				return false
			}
		}
		return true
	case *rbacpb.Principal_OrIds:
		for _, x := range id.OrIds.GetIds() {
			if e.principal(x) {
				return true
			}
		}
		return false
	case *rbacpb.Principal_Authenticated_:
		if e.r.id == "" {
			return false
		}
		m := id.Authenticated.GetPrincipalName()
		return m == nil || e.str(m, e.r.id)
	case *rbacpb.Principal_DirectRemoteIp:
		return inCIDR(e.t, id.DirectRemoteIp.GetAddressPrefix(), id.DirectRemoteIp.GetPrefixLen().GetValue(), e.r.src)
	case *rbacpb.Principal_RemoteIp:
		addr := e.r.remote
		if e.grpc {
			addr = e.r.src
		}
		return inCIDR(e.t, id.RemoteIp.GetAddressPrefix(), id.RemoteIp.GetPrefixLen().GetValue(), addr)
	case *rbacpb.Principal_Header:
		return e.header(id.Header)
	}
	e.t.Fatalf("principal the evaluator does not know: %v", p)
	return false
}

func (e evaluator) permission(p *rbacpb.Permission) bool {
	switch rule := p.GetRule().(type) {
	case *rbacpb.Permission_Any:
		return true
	case *rbacpb.Permission_NotRule:
		return !e.permission(rule.NotRule)
	case *rbacpb.Permission_AndRules:
		for _, x := range rule.AndRules.GetRules() {
			if !e.permission(x) {
				return false
			}
		}
		return true
	case *rbacpb.Permission_OrRules:
		for _, x := range rule.OrRules.GetRules() {
			if e.permission(x) {
				return true
			}
		}
		return false
	case *rbacpb.Permission_DestinationPort:
		return rule.DestinationPort == e.r.port
	case *rbacpb.Permission_DestinationIp:
		return inCIDR(e.t, rule.DestinationIp.GetAddressPrefix(), rule.DestinationIp.GetPrefixLen().GetValue(), e.r.dst)
	case *rbacpb.Permission_RequestedServerName:
		if e.grpc {
			return e.str(rule.RequestedServerName, "")
		}
		return e.str(rule.RequestedServerName, e.r.sni)
	case *rbacpb.Permission_Header:
		return e.header(rule.Header)
	case *rbacpb.Permission_UrlPath:
		e.httpOnly(p)
		path, _, _ := strings.Cut(e.r.path, "?")
		return e.str(rule.UrlPath.GetPath(), path)
	case *rbacpb.Permission_UriTemplate:
		e.httpOnly(p)
		if e.grpc {
			e.t.Fatalf("gRPC cannot evaluate %v", p)
		}
		var cfg uritemplate.UriTemplateMatchConfig
		if err := rule.UriTemplate.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			e.t.Fatal(err)
		}
		path, _, _ := strings.Cut(e.r.path, "?")
		return templateRegex(cfg.GetPathTemplate()).MatchString(path)
	case *rbacpb.Permission_Metadata:
		if e.grpc {
			e.t.Fatalf("gRPC cannot evaluate %v", p)
		}
		return e.metadata(rule.Metadata)
	}
	e.t.Fatalf("permission the evaluator does not know: %v", p)
	return false
}

func (e evaluator) httpOnly(x any) {
	if e.tcp {
		e.t.Fatalf("HTTP matcher on a TCP chain: %v", x)
	}
}

func (e evaluator) header(h *route.HeaderMatcher) bool {
	e.httpOnly(h)
	name := strings.ToLower(h.GetName())
	if e.grpc && (name == ":scheme" || strings.HasPrefix(name, "grpc-")) {
		e.t.Fatalf("gRPC refuses a header matcher for %q", name)
	}
	headers := map[string]string{":method": e.r.method, ":path": e.r.path, ":authority": e.r.host}
	for k, v := range e.r.headers {
		headers[strings.ToLower(k)] = v
	}
	v, ok := headers[name]
	switch m := h.GetHeaderMatchSpecifier().(type) {
	case *route.HeaderMatcher_PresentMatch:
		return ok == m.PresentMatch
	case *route.HeaderMatcher_StringMatch:
		return ok && e.str(m.StringMatch, v)
	}
	e.t.Fatalf("header matcher the evaluator does not know: %v", h)
	return false
}

func (e evaluator) metadata(m *matcher.MetadataMatcher) bool {
	v, ok := e.r.metadata[m.GetFilter()][m.GetPath()[0].GetKey()]
	if !ok {
		return false
	}
	var match func(vm *matcher.ValueMatcher, v any) bool
	match = func(vm *matcher.ValueMatcher, v any) bool {
		switch p := vm.GetMatchPattern().(type) {
		case *matcher.ValueMatcher_StringMatch:
			s, ok := v.(string)
			return ok && e.str(p.StringMatch, s)
		case *matcher.ValueMatcher_ListMatch:
			list, _ := v.([]string)
			for _, s := range list {
				if match(p.ListMatch.GetOneOf(), s) {
					return true
				}
			}
			return false
		}
		e.t.Fatalf("value matcher the evaluator does not know: %v", vm)
		return false
	}
	return match(m.GetValue(), v)
}

func (e evaluator) str(m *matcher.StringMatcher, s string) bool {
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
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			e.t.Fatalf("bad regex %q: %v", p.SafeRegex.GetRegex(), err)
		}
		return re.MatchString(s)
	}
	e.t.Fatalf("string matcher the evaluator does not know: %v", m)
	return false
}

func inCIDR(t *testing.T, addr string, bits uint32, ip string) bool {
	p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", addr, bits))
	if err != nil {
		t.Fatalf("bad CIDR %s/%d: %v", addr, bits, err)
	}
	return p.Masked().Contains(netip.MustParseAddr(ip))
}

// templateRegex is Envoy's reading of a path template: "*" one segment,
// "**" any number of them.
func templateRegex(tmpl string) *regexp.Regexp {
	const lit = `a-zA-Z0-9\-._~%!$&'()+,;:@`
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
	return regexp.MustCompile("^/" + strings.Join(segs, "/") + "$")
}
