package policy

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// retryOn are the retry conditions Envoy knows (x-envoy-retry-on and
// x-envoy-retry-grpc-on); an HTTP status code is one too.
var retryOn = set("5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "retriable-4xx",
	"refused-stream", "retriable-status-codes", "retriable-headers", "envoy-ratelimited", "http3-post-connect-failure",
	"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable")

var corsMethods = set(http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace, "*")

var grpcStatuses = set("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")

var pseudoHeaders = set(":method", ":scheme", ":authority", ":path", ":status")

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// checkHTTPRoute checks one http route; delegate: of a VirtualService
// without hosts, reached from a root's route.
func checkHTTPRoute(f *Findings, p string, r *networking.HTTPRoute, delegate bool) {
	checkHTTPRouteShape(f, p, r, delegate)
	if len(r.GetMatch()) > MaxRoutes {
		f.errorf(p+".match", "%d matches, more than %d", len(r.GetMatch()), MaxRoutes)
		return
	}
	for i, m := range r.GetMatch() {
		if m != nil {
			checkHTTPMatch(f, at(p+".match", i), m)
		}
	}
	checkHeaderOps(f, p+".headers", r.GetHeaders())
	checkCORS(f, p+".corsPolicy", r.GetCorsPolicy())
	checkFault(f, p+".fault", r.GetFault())
	if mp := r.GetMirrorPercent(); mp != nil { //nolint:staticcheck // Istio still reads the deprecated field.
		if mp.GetValue() > 100 {
			f.errorf(p+".mirrorPercent", "%d is more than 100", mp.GetValue())
		}
		f.warnf(p+".mirrorPercent", "deprecated; use mirrorPercentage")
	}
	if mp := r.GetMirrorPercentage(); mp != nil && (mp.GetValue() > 100 || mp.GetValue() < 0) {
		f.errorf(p+".mirrorPercentage", "%v is not in 0-100", mp.GetValue())
	}
	checkDestination(f, p+".mirror", r.GetMirror())
	for i, m := range r.GetMirrors() {
		mp := at(p+".mirrors", i)
		switch {
		case m == nil:
			f.errorf(mp, "must not be null")
		case m.GetDestination() == nil:
			f.errorf(mp+".destination", "must be set")
		default:
			checkDestination(f, mp+".destination", m.GetDestination())
			if v := m.GetPercentage().GetValue(); m.GetPercentage() != nil && (v > 100 || v < 0) {
				f.errorf(mp+".percentage", "%v is not in 0-100", v)
			}
		}
	}
	f.check(p+".redirect", checkRedirect(r.GetRedirect(), r.GetMatch()))
	checkDirectResponse(f, p+".directResponse", r.GetDirectResponse())
	checkRetries(f, p+".retries", r.GetRetries())
	checkRewrite(f, p+".rewrite", r.GetRewrite())
	checkAuthorityRewrites(f, p, r)
	checkHTTPDestinations(f, p+".route", r.GetRoute())
	if r.GetTimeout() != nil {
		f.check(p+".timeout", checkDuration(r.GetTimeout()))
	}
}

// checkHTTPRouteShape refuses routes that say two things at once, or
// nothing: a route, a redirect, a direct response or (from a root) a
// delegate.
func checkHTTPRouteShape(f *Findings, p string, r *networking.HTTPRoute, delegate bool) {
	if !delegate && r.GetDelegate() != nil {
		if r.GetRedirect() != nil {
			f.errorf(p+".redirect", "a route with a delegate cannot redirect")
		}
		if len(r.GetRoute()) > 0 {
			f.errorf(p+".route", "a route with a delegate cannot have destinations")
		}
		return
	}
	if delegate && r.GetDelegate() != nil {
		f.errorf(p+".delegate", "a delegate's route cannot delegate again")
	}
	switch {
	case r.GetRedirect() != nil:
		for _, c := range []struct {
			field string
			set   bool
		}{{"route", len(r.GetRoute()) > 0}, {"fault", r.GetFault() != nil}, {"rewrite", r.GetRewrite() != nil},
			{"directResponse", r.GetDirectResponse() != nil}} {
			if c.set {
				f.errorf(p+"."+c.field, "cannot be set with redirect")
			}
		}
	case r.GetDirectResponse() != nil:
		for _, c := range []struct {
			field string
			set   bool
		}{{"route", len(r.GetRoute()) > 0}, {"fault", r.GetFault() != nil}, {"rewrite", r.GetRewrite() != nil}} {
			if c.set {
				f.errorf(p+"."+c.field, "cannot be set with directResponse")
			}
		}
	case len(r.GetRoute()) == 0:
		f.errorf(p, "one of route, redirect or directResponse is required")
	}
	if r.GetMirror() != nil && len(r.GetMirrors()) > 0 {
		f.errorf(p+".mirrors", "cannot be set with mirror")
	}
}

func checkHTTPMatch(f *Findings, p string, m *networking.HTTPMatchRequest) {
	for _, h := range sortedKeys(m.GetHeaders()) {
		v := m.GetHeaders()[h]
		if v == nil {
			f.errorf(key(p+".headers", h), "must not be null")
		}
		f.check(key(p+".headers", h), checkMatchHeaderName(h))
		f.check(key(p+".headers", h), checkStringMatch(v))
	}
	for _, h := range sortedKeys(m.GetWithoutHeaders()) {
		v := m.GetWithoutHeaders()[h]
		f.check(key(p+".withoutHeaders", h), checkMatchHeaderName(h))
		if v != nil && v.GetRegex() != "*" { // "*" means present, not a regex
			f.check(key(p+".withoutHeaders", h), checkStringMatch(v))
		}
	}
	// An empty uri prefix matches every path; the other fields need one.
	f.check(p+".uri", checkRegexMatch(m.GetUri()))
	f.check(p+".scheme", checkStringMatch(m.GetScheme()))
	f.check(p+".method", checkStringMatch(m.GetMethod()))
	f.check(p+".authority", checkStringMatch(m.GetAuthority()))
	for _, q := range sortedKeys(m.GetQueryParams()) {
		f.check(key(p+".queryParams", q), checkStringMatch(m.GetQueryParams()[q]))
	}
	if m.GetPort() != 0 {
		f.check(p+".port", checkPort(int64(m.GetPort())))
	}
	checkLabels(f, p+".sourceLabels", m.GetSourceLabels())
	checkGatewayNames(f, p+".gateways", m.GetGateways())
	if ns := m.GetSourceNamespace(); ns != "" && !isDNSLabel(ns) {
		f.errorf(p+".sourceNamespace", "%s is not a namespace", quote(ns))
	}
}

func checkStringMatch(m *networking.StringMatch) string {
	if _, ok := m.GetMatchType().(*networking.StringMatch_Prefix); ok && m.GetPrefix() == "" {
		return "an empty prefix match"
	}
	return checkRegexMatch(m)
}

func checkRegexMatch(m *networking.StringMatch) string {
	if _, ok := m.GetMatchType().(*networking.StringMatch_Regex); !ok {
		return ""
	}
	if m.GetRegex() == "" {
		return "an empty regex match"
	}
	return CheckRegex(m.GetRegex())
}

// isClaimHeader reports whether a match header names a JWT claim:
// @request.auth.claims.<name> or @request.auth.claims[<name>].
func isClaimHeader(h string) bool {
	const prefix = "@request.auth.claims"
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	rest := h[len(prefix):]
	return (strings.HasPrefix(rest, ".") && len(rest) > 1) ||
		(strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]") && len(rest) > 2)
}

func checkMatchHeaderName(h string) string {
	switch {
	case h == "":
		return "empty header name"
	case isClaimHeader(h), pseudoHeaders[h]:
		return ""
	case !headerNameRE.MatchString(h):
		return quote(h) + " is not a header name"
	}
	return ""
}

func checkHeaderOps(f *Findings, p string, h *networking.Headers) {
	req, resp := h.GetRequest(), h.GetResponse()
	for _, n := range sortedKeys(req.GetAdd()) {
		f.check(key(p+".request.add", n), checkRequestHeaderSet(n))
		f.check(key(p+".request.add", n), checkHeaderValue(req.GetAdd()[n]))
	}
	for _, n := range sortedKeys(req.GetSet()) {
		f.check(key(p+".request.set", n), checkRequestHeaderSet(n))
		f.check(key(p+".request.set", n), checkHeaderValue(req.GetSet()[n]))
	}
	for i, n := range req.GetRemove() {
		f.check(at(p+".request.remove", i), checkHeaderChange(n))
	}
	for _, n := range sortedKeys(resp.GetAdd()) {
		f.check(key(p+".response.add", n), checkHeaderChange(n))
		f.check(key(p+".response.add", n), checkHeaderValue(resp.GetAdd()[n]))
	}
	for _, n := range sortedKeys(resp.GetSet()) {
		f.check(key(p+".response.set", n), checkHeaderChange(n))
		f.check(key(p+".response.set", n), checkHeaderValue(resp.GetSet()[n]))
	}
	for i, n := range resp.GetRemove() {
		f.check(at(p+".response.remove", i), checkHeaderChange(n))
	}
}

func isAuthority(h string) bool {
	return strings.EqualFold(h, ":authority") || strings.EqualFold(h, "host")
}

// checkRequestHeaderSet: a request header set or added; the authority may
// be.
func checkRequestHeaderSet(h string) string {
	switch {
	case h == "":
		return "empty header name"
	case (strings.HasPrefix(h, ":") || strings.EqualFold(h, "host")) && !isAuthority(h):
		return "header " + quote(h) + ": pseudo-headers cannot be changed"
	}
	return ""
}

// checkHeaderChange: a request header removed, or a response header
// changed: neither the host nor a pseudo-header.
func checkHeaderChange(h string) string {
	switch {
	case h == "":
		return "empty header name"
	case strings.EqualFold(h, "host"):
		return "the Host header cannot be changed"
	case strings.HasPrefix(h, ":"):
		return "header " + quote(h) + ": pseudo-headers cannot be changed"
	}
	return ""
}

// checkHeaderValue checks a header value as Envoy's header formatter reads
// it: no control characters, "%%" for a literal "%", and every "%" opening
// a %VARIABLE% or %VARIABLE(args)% that is closed.
func checkHeaderValue(v string) string {
	if !headerValueRE.MatchString(v) {
		return "header value " + quote(v) + " holds control characters"
	}
	const (
		literal = iota
		name
		argsOpen  // after "(": "[" or an argument
		argString // in a "..." argument
		argNext   // after an argument: "," or "]"
		argQuote  // expecting the opening quote of an argument
		argsClose // expecting ")"
		varClose  // expecting "%"
	)
	state := literal
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch state {
		case literal:
			if c != '%' {
				continue
			}
			if i+1 == len(v) {
				return "header value " + quote(v) + ": a lone % at the end; write %%"
			}
			if v[i+1] == '%' {
				i++
				continue
			}
			state = name
		case name:
			switch c {
			case '%':
				state = literal
			case '(':
				state = argsOpen
			}
		case argsOpen:
			if c == '[' {
				state = argQuote
			} else if c != ' ' {
				state = argString
			}
		case argNext:
			switch {
			case c == ',':
				state = argQuote
			case c == ']':
				state = argsClose
			case c != ' ':
				return "header value " + quote(v) + ": expected ',' or ']'"
			}
		case argQuote:
			if c == '"' {
				state = argString
			} else if c != ' ' {
				return "header value " + quote(v) + ": expected '\"'"
			}
		case argString:
			switch c {
			case '\\':
				if i+1 == len(v) {
					return "header value " + quote(v) + ": unterminated escape"
				}
				i++
			case ')':
				state = varClose
			case '"':
				state = argNext
			}
		case argsClose:
			if c == ')' {
				state = varClose
			} else if c != ' ' {
				return "header value " + quote(v) + ": expected ')'"
			}
		case varClose:
			if c == '%' {
				state = literal
			} else if c != ' ' {
				return "header value " + quote(v) + ": expected '%'"
			}
		}
	}
	if state != literal {
		return "header value " + quote(v) + ": unterminated %VARIABLE%"
	}
	return ""
}

func checkCORS(f *Findings, p string, c *networking.CorsPolicy) {
	if c == nil {
		return
	}
	for i, o := range c.GetAllowOrigins() {
		var s string
		switch o.GetMatchType().(type) {
		case *networking.StringMatch_Exact:
			s = o.GetExact()
		case *networking.StringMatch_Prefix:
			s = o.GetPrefix()
		case *networking.StringMatch_Regex:
			s = o.GetRegex()
		}
		if s == "" {
			f.errorf(at(p+".allowOrigins", i), "an empty or unset match")
			continue
		}
		f.check(at(p+".allowOrigins", i), checkRegexMatch(o))
	}
	for i, m := range c.GetAllowMethods() {
		if !corsMethods[m] {
			f.errorf(at(p+".allowMethods", i), "%s is not an HTTP method", quote(m))
		}
	}
	for _, h := range []struct {
		field string
		names []string
	}{{"allowHeaders", c.GetAllowHeaders()}, {"exposeHeaders", c.GetExposeHeaders()}} {
		for i, n := range h.names {
			if n != "*" && !headerNameRE.MatchString(n) {
				f.errorf(at(p+"."+h.field, i), "%s is not a header name", quote(n))
			}
		}
	}
	if a := c.GetMaxAge(); a != nil {
		f.check(p+".maxAge", checkDuration(a))
		if a.GetNanos() > 0 {
			f.errorf(p+".maxAge", "only whole seconds")
		}
	}
}

func checkPercentage(p *networking.Percent) string {
	if p == nil {
		return ""
	}
	if v := p.GetValue(); v < 0 || v > 100 || (v > 0 && v < 0.0001) {
		return "percentage " + strconv.FormatFloat(v, 'g', -1, 64) + " is neither 0 nor in 0.0001-100"
	}
	return ""
}

func checkFault(f *Findings, p string, fault *networking.HTTPFaultInjection) {
	if fault == nil {
		return
	}
	if fault.GetAbort() == nil && fault.GetDelay() == nil {
		f.errorf(p, "needs an abort, a delay or both")
	}
	if a := fault.GetAbort(); a != nil {
		f.check(p+".abort.percentage", checkPercentage(a.GetPercentage()))
		switch a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			if !grpcStatuses[a.GetGrpcStatus()] {
				f.errorf(p+".abort.grpcStatus", "%s is not a gRPC status name such as NOT_FOUND", quote(a.GetGrpcStatus()))
			}
		case *networking.HTTPFaultInjection_Abort_Http2Error:
			f.errorf(p+".abort.http2Error", "not supported")
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			f.check(p+".abort.httpStatus", checkHTTPStatus(int64(a.GetHttpStatus())))
		default:
			f.warnf(p+".abort", "no error type set")
		}
	}
	if d := fault.GetDelay(); d != nil {
		f.check(p+".delay.percentage", checkPercentage(d.GetPercentage()))
		switch t := d.GetHttpDelayType().(type) {
		case *networking.HTTPFaultInjection_Delay_FixedDelay:
			f.check(p+".delay.fixedDelay", checkDuration(t.FixedDelay))
		case *networking.HTTPFaultInjection_Delay_ExponentialDelay:
			f.check(p+".delay.exponentialDelay", checkDuration(t.ExponentialDelay))
			f.errorf(p+".delay.exponentialDelay", "not supported")
		}
	}
}

func checkHTTPStatus(s int64) string {
	if s < 200 || s > 600 {
		return "HTTP status " + strconv.FormatInt(s, 10) + " is not in 200-599"
	}
	return ""
}

func checkRedirect(r *networking.HTTPRedirect, matches []*networking.HTTPMatchRequest) string {
	if r == nil {
		return ""
	}
	if r.GetUri() != "" && r.GetPrefixRewrite() != "" {
		return "only one of uri and prefixRewrite may be set"
	}
	if r.GetPrefixRewrite() != "" {
		for _, m := range matches {
			if _, prefix := m.GetUri().GetMatchType().(*networking.StringMatch_Prefix); m.GetUri() != nil && !prefix {
				return "prefixRewrite needs every uri match to be a prefix match"
			}
		}
	}
	if r.GetUri() == "" && r.GetPrefixRewrite() == "" && r.GetAuthority() == "" && r.GetRedirectPort() == nil && r.GetScheme() == "" {
		return "a redirect needs a uri, prefixRewrite, authority, scheme or port"
	}
	if c := r.GetRedirectCode(); c != 0 && (c < 300 || c > 399) {
		return strconv.FormatUint(uint64(c), 10) + " is not a 3xx redirect code"
	}
	if s := r.GetScheme(); s != "" && s != "http" && s != "https" {
		return "scheme " + quote(s) + " is neither http nor https"
	}
	if r.GetPort() > 0 {
		return checkPort(int64(r.GetPort()))
	}
	return ""
}

func checkDirectResponse(f *Findings, p string, d *networking.HTTPDirectResponse) {
	if d == nil {
		return
	}
	size := len(d.GetBody().GetString_()) + len(d.GetBody().GetBytes())
	switch {
	case size > MaxDirectResponseBytes:
		f.errorf(p+".body", "%d bytes, more than 1MiB", size)
	case size > 100<<10:
		f.warnf(p+".body", "%d bytes: large direct responses cost every proxy that holds them", size)
	}
	f.check(p+".status", checkHTTPStatus(int64(d.GetStatus())))
}

func checkRetries(f *Findings, p string, r *networking.HTTPRetry) {
	if r == nil {
		return
	}
	if r.GetAttempts() < 0 {
		f.errorf(p+".attempts", "cannot be negative")
	}
	if r.GetAttempts() == 0 && (r.GetPerTryTimeout() != nil || r.GetRetryOn() != "" || r.GetRetryRemoteLocalities() != nil) {
		f.errorf(p, "a retry policy with attempts 0 (retries disabled)")
	}
	if r.GetPerTryTimeout() != nil {
		f.check(p+".perTryTimeout", checkDuration(r.GetPerTryTimeout()))
	}
	if r.GetRetryOn() != "" {
		for c := range strings.SplitSeq(r.GetRetryOn(), ",") {
			code, _ := strconv.Atoi(c)
			if http.StatusText(code) == "" && !retryOn[c] {
				f.errorf(p+".retryOn", "%s is not a retry condition", quote(c))
			}
		}
	}
	if r.GetBackoff() != nil {
		f.check(p+".backoff", checkDuration(r.GetBackoff()))
	}
}

func checkRewrite(f *Findings, p string, r *networking.HTTPRewrite) {
	if r == nil {
		return
	}
	if r.GetUri() != "" && r.GetUriRegexRewrite() != nil {
		f.errorf(p, "only one of uri and uriRegexRewrite may be set")
		return
	}
	if r.GetUri() == "" && r.GetUriRegexRewrite() == nil && r.GetAuthority() == "" {
		f.errorf(p, "a rewrite needs a uri, uriRegexRewrite or authority")
		return
	}
	if rr := r.GetUriRegexRewrite(); rr != nil {
		if rr.GetMatch() == "" || rr.GetRewrite() == "" {
			f.errorf(p+".uriRegexRewrite", "needs both match and rewrite")
			return
		}
		f.check(p+".uriRegexRewrite.match", CheckRegex(rr.GetMatch()))
	}
}

// checkAuthorityRewrites refuses a route that sets the authority twice:
// by rewrite.authority and by a request header, or by two headers.
func checkAuthorityRewrites(f *Findings, p string, r *networking.HTTPRoute) {
	current := r.GetRewrite().GetAuthority()
	for _, set := range []map[string]string{r.GetHeaders().GetRequest().GetSet(), r.GetHeaders().GetRequest().GetAdd()} {
		for _, k := range sortedKeys(set) {
			if !isAuthority(k) {
				continue
			}
			if current != "" {
				f.errorf(p+".headers.request", "the authority is set more than once (%s, then %s)", quote(current), quote(set[k]))
				return
			}
			current = set[k]
		}
	}
}

func checkHTTPDestinations(f *Findings, p string, ds []*networking.HTTPRouteDestination) {
	checkWeighted(f, p, ds, func(dp string, d *networking.HTTPRouteDestination) {
		checkHeaderOps(f, dp+".headers", d.GetHeaders())
	})
}
