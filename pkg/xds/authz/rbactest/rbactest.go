// Package rbactest decides requests as a data plane's RBAC filters do, so
// that tests can check what generated RBAC means rather than how it reads:
// Envoy's HTTP and network RBAC filters, or gRPC-Go's authorization (gRFC
// A41). A matcher it does not know, a field of a known matcher it does not
// evaluate, or an HTTP matcher on a TCP chain fails the test instead of
// guessing.
package rbactest

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

// Request is a request (or, on a TCP chain, a connection) as RBAC sees it:
// after the connection manager has normalized the path, so Path is what
// RBAC matches, whatever the client sent.
type Request struct {
	ID      string // the peer's verified URI SAN; empty for a plaintext peer
	Src     string // the connection's peer address (source.ip, ipBlocks)
	Remote  string // the original client address (remote.ip, remoteIpBlocks)
	Dst     string
	Port    uint32
	SNI     string
	Method  string
	Path    string
	Host    string // :authority
	Headers map[string]string
	// Metadata is the dynamic metadata: filter → key → value, values
	// nesting as in a JWT payload (JWT sets the jwt_authn filter's).
	Metadata map[string]map[string]any
}

func (r Request) String() string {
	id := r.ID
	if id == "" {
		id = "plaintext"
	}
	return fmt.Sprintf("%s src=%s remote=%s dst=%s:%d sni=%q %s %s host=%q headers=%v metadata=%v",
		id, r.Src, r.Remote, r.Dst, r.Port, r.SNI, r.Method, r.Path, r.Host, r.Headers, r.Metadata)
}

// Evaluator decides requests for one data plane and chain kind.
type Evaluator struct {
	t       testing.TB
	grpc    bool // gRPC-Go: no SNI, remote.ip is the peer, no metadata or path templates
	tcp     bool
	regexes map[string]*regexp.Regexp
}

// Envoy is an evaluator of Envoy's RBAC filters on an HTTP chain, or with
// tcp on a TCP chain.
func Envoy(t testing.TB, tcp bool) *Evaluator { return newEvaluator(t, false, tcp) }

// GRPC is an evaluator of gRPC-Go's authorization.
func GRPC(t testing.TB) *Evaluator { return newEvaluator(t, true, false) }

func newEvaluator(t testing.TB, grpc, tcp bool) *Evaluator {
	return &Evaluator{t: t, grpc: grpc, tcp: tcp, regexes: map[string]*regexp.Regexp{}}
}

// Allowed runs the filters in order: a DENY filter with a matching policy
// denies, an ALLOW filter without one denies, LOG never decides.
func (e *Evaluator) Allowed(filters []*rbacpb.RBAC, r Request) bool {
	e.t.Helper()
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
func (e *Evaluator) policy(p *rbacpb.Policy, r Request) bool {
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

func (e *Evaluator) principal(p *rbacpb.Principal, r Request) bool {
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
		// The URI SAN of a verified peer certificate; a plaintext peer is
		// not authenticated.
		if r.ID == "" {
			return false
		}
		m := id.Authenticated.GetPrincipalName()
		return m == nil || e.str(m, r.ID)
	case *rbacpb.Principal_DirectRemoteIp:
		return e.inCIDR(id.DirectRemoteIp, r.Src)
	case *rbacpb.Principal_RemoteIp:
		if e.grpc {
			return e.inCIDR(id.RemoteIp, r.Src) // gRPC has no x-forwarded-for
		}
		return e.inCIDR(id.RemoteIp, r.Remote)
	case *rbacpb.Principal_SourceIp: //nolint:staticcheck // deprecated, but what older output used
		return e.inCIDR(id.SourceIp, r.Src) //nolint:staticcheck
	case *rbacpb.Principal_Header:
		return e.header(id.Header, r)
	case *rbacpb.Principal_Metadata:
		e.httpOnly(p)
		if e.grpc {
			e.t.Fatalf("gRPC cannot evaluate %v", p)
		}
		return e.metadata(id.Metadata, r)
	}
	e.t.Fatalf("principal the evaluator does not know: %v", p)
	return false
}

func (e *Evaluator) permission(p *rbacpb.Permission, r Request) bool {
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
		return rule.DestinationPort == r.Port
	case *rbacpb.Permission_DestinationPortRange:
		return int64(r.Port) >= int64(rule.DestinationPortRange.GetStart()) && int64(r.Port) < int64(rule.DestinationPortRange.GetEnd())
	case *rbacpb.Permission_DestinationIp:
		return e.inCIDR(rule.DestinationIp, r.Dst)
	case *rbacpb.Permission_RequestedServerName:
		if e.grpc {
			return e.str(rule.RequestedServerName, "") // gRPC sees no SNI
		}
		return e.str(rule.RequestedServerName, r.SNI)
	case *rbacpb.Permission_Header:
		return e.header(rule.Header, r)
	case *rbacpb.Permission_UrlPath:
		e.httpOnly(p)
		if rule.UrlPath.GetPath() == nil {
			e.t.Fatalf("path matcher without a string matcher: %v", p)
		}
		return e.str(rule.UrlPath.GetPath(), urlPath(r.Path))
	case *rbacpb.Permission_UriTemplate:
		e.httpOnly(p)
		if e.grpc {
			e.t.Fatalf("gRPC cannot evaluate %v", p)
		}
		var cfg uritemplate.UriTemplateMatchConfig
		if err := rule.UriTemplate.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
			e.t.Fatalf("uri_template config: %v", err)
		}
		return e.regex(templateRegex(cfg.GetPathTemplate())).MatchString(urlPath(r.Path))
	case *rbacpb.Permission_Metadata:
		if e.grpc {
			e.t.Fatalf("gRPC cannot evaluate %v", p)
		}
		return e.metadata(rule.Metadata, r)
	}
	e.t.Fatalf("permission the evaluator does not know: %v", p)
	return false
}

// urlPath is the path without query and fragment.
func urlPath(p string) string {
	p, _, _ = strings.Cut(p, "?")
	p, _, _ = strings.Cut(p, "#")
	return p
}

func (e *Evaluator) httpOnly(x any) {
	if e.tcp {
		e.t.Fatalf("HTTP matcher on a TCP chain: %v", x)
	}
}

// header matches as Envoy's HeaderMatcher: :method, :path (with query) and
// :authority are headers too.
func (e *Evaluator) header(h *route.HeaderMatcher, r Request) bool {
	e.httpOnly(h)
	if h.GetInvertMatch() || h.GetTreatMissingHeaderAsEmpty() {
		e.t.Fatalf("header matcher with invert_match or treat_missing_header_as_empty: %v", h)
	}
	name := strings.ToLower(h.GetName())
	if e.grpc && (name == ":scheme" || strings.HasPrefix(name, "grpc-")) {
		e.t.Fatalf("gRPC refuses a header matcher for %q", name)
	}
	headers := map[string]string{":method": r.Method, ":path": r.Path, ":authority": r.Host}
	for k, v := range r.Headers {
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

// metadata matches the request's dynamic metadata: the filter's entry,
// then a key per path segment into nested objects (map[string]any).
// Values are strings, numbers, booleans, []string, []any or objects, as
// jwt_authn leaves a token's payload.
func (e *Evaluator) metadata(m *matcher.MetadataMatcher, r Request) bool {
	if len(m.GetPath()) == 0 || m.GetInvert() {
		e.t.Fatalf("metadata matcher the evaluator does not know: %v", m)
	}
	var v any = map[string]any(r.Metadata[m.GetFilter()])
	for _, seg := range m.GetPath() {
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = obj[seg.GetKey()]; !ok {
			return false
		}
	}
	return e.value(m.GetValue(), v)
}

// value is Envoy's ValueMatcher for the kinds policies produce.
func (e *Evaluator) value(vm *matcher.ValueMatcher, v any) bool {
	switch p := vm.GetMatchPattern().(type) {
	case *matcher.ValueMatcher_StringMatch:
		s, ok := v.(string)
		return ok && e.str(p.StringMatch, s)
	case *matcher.ValueMatcher_ListMatch:
		var list []any
		switch l := v.(type) {
		case []string:
			for _, s := range l {
				list = append(list, s)
			}
		case []any:
			list = l
		}
		for _, x := range list {
			if e.value(p.ListMatch.GetOneOf(), x) {
				return true
			}
		}
		return false
	case *matcher.ValueMatcher_OrMatch:
		for _, x := range p.OrMatch.GetValueMatchers() {
			if e.value(x, v) {
				return true
			}
		}
		return false
	}
	e.t.Fatalf("value matcher the evaluator does not know: %v", vm)
	return false
}

// str is Envoy's StringMatcher; ignore_case has no effect on safe_regex.
func (e *Evaluator) str(m *matcher.StringMatcher, s string) bool {
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
		// RE2, and it must match the whole value.
		return e.regex("^(?:" + p.SafeRegex.GetRegex() + ")$").MatchString(s)
	}
	e.t.Fatalf("string matcher the evaluator does not know: %v", m)
	return false
}

func (e *Evaluator) regex(expr string) *regexp.Regexp {
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

func (e *Evaluator) inCIDR(c *core.CidrRange, ip string) bool {
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
