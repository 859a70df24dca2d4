package routes

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"
)

// forward makes out a route to rule's destinations, as Istio's
// applyHTTPRouteDestination.
func (t *translator) forward(out *routev3.Route, rule *networkingv1.HTTPRoute, authority string) error {
	action := &routev3.RouteAction{}
	action.Timeout, action.MaxGrpcTimeout = timeoutOf(rule.GetTimeout())
	out.Action = &routev3.Route_Route{Route: action}
	if err := destinationsNamed(rule); err != nil {
		return err
	}
	if rw := rule.GetRewrite(); rw != nil {
		if rr := rw.GetUriRegexRewrite(); rr != nil {
			if err := t.rs.check(rr.GetMatch()); err != nil {
				return fmt.Errorf("uriRegexRewrite: %w", err)
			}
			action.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{
				Pattern:      &matcherv3.RegexMatcher{Regex: rr.GetMatch()},
				Substitution: rr.GetRewrite(),
			}
		} else if rw.GetUri() != "" {
			action.PrefixRewrite = rw.GetUri()
		}
		if rw.GetAuthority() != "" {
			authority = rw.GetAuthority()
		}
	}
	if authority != "" {
		action.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: authority}
	}
	// Mirrors: a copy of each request, its response discarded, goes to
	// another service. Istio's rules: "mirror" with mirrorPercentage (or
	// the older mirrorPercent), 100% when neither is set, none when it
	// is 0; then each of "mirrors" alike.
	if m := rule.GetMirror(); m != nil {
		if frac := mirrorFraction(rule.GetMirrorPercentage(), rule.GetMirrorPercent()); frac != nil {
			action.RequestMirrorPolicies = append(action.RequestMirrorPolicies, t.mirrorPolicy(m, frac))
		}
	}
	for _, m := range rule.GetMirrors() {
		if m.GetDestination() == nil {
			continue
		}
		if frac := mirrorFraction(m.GetPercentage(), nil); frac != nil {
			action.RequestMirrorPolicies = append(action.RequestMirrorPolicies, t.mirrorPolicy(m.GetDestination(), frac))
		}
	}
	hashed := false
	if dsts := rule.GetRoute(); len(dsts) == 1 {
		d := dsts[0]
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: t.cluster(d.GetDestination())}
		if h := d.GetHeaders(); h != nil {
			ops, err := headerOps(h)
			if err != nil {
				return err
			}
			out.RequestHeadersToAdd = append(out.RequestHeadersToAdd, ops.reqAdd...)
			out.RequestHeadersToRemove = append(out.RequestHeadersToRemove, ops.reqRemove...)
			out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, ops.respAdd...)
			out.ResponseHeadersToRemove = append(out.ResponseHeadersToRemove, ops.respRemove...)
			if ops.authority != "" && action.HostRewriteSpecifier == nil {
				action.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: ops.authority}
			}
		}
		if hp := t.hashPolicy(d.GetDestination()); hp != nil {
			action.HashPolicy = append(action.HashPolicy, hp)
			hashed = true
		}
	} else {
		weighted := &routev3.WeightedCluster{}
		for _, d := range dsts {
			if d.GetWeight() == 0 {
				continue
			}
			cw := &routev3.WeightedCluster_ClusterWeight{
				Name:   t.cluster(d.GetDestination()),
				Weight: uint32Value(uint32(d.GetWeight())),
			}
			if h := d.GetHeaders(); h != nil {
				ops, err := headerOps(h)
				if err != nil {
					return err
				}
				cw.RequestHeadersToAdd, cw.RequestHeadersToRemove = ops.reqAdd, ops.reqRemove
				cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove = ops.respAdd, ops.respRemove
				if ops.authority != "" {
					cw.HostRewriteSpecifier = &routev3.WeightedCluster_ClusterWeight_HostRewriteLiteral{HostRewriteLiteral: ops.authority}
				}
			}
			if hp := t.hashPolicy(d.GetDestination()); hp != nil {
				action.HashPolicy = append(action.HashPolicy, hp)
			}
			weighted.Clusters = append(weighted.Clusters, cw)
		}
		action.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: weighted}
	}
	retries := rule.GetRetries()
	if retries == nil {
		retries = t.o.DefaultRetry
	}
	action.RetryPolicy = retryPolicy(retries, hashed)
	return nil
}

// destinationsNamed refuses a destination or mirror without a host: Istio
// routes it to a cluster that cannot exist; the webhook refuses it.
func destinationsNamed(rule *networkingv1.HTTPRoute) error {
	for i, d := range rule.GetRoute() {
		if d.GetDestination().GetHost() == "" {
			return fmt.Errorf("route[%d]: destination without a host", i)
		}
	}
	if m := rule.GetMirror(); m != nil && m.GetHost() == "" {
		return fmt.Errorf("mirror without a host")
	}
	for i, m := range rule.GetMirrors() {
		if m.GetDestination() != nil && m.GetDestination().GetHost() == "" {
			return fmt.Errorf("mirrors[%d]: destination without a host", i)
		}
	}
	return nil
}

func (t *translator) mirrorPolicy(d *networkingv1.Destination, frac *typev3.FractionalPercent) *routev3.RouteAction_RequestMirrorPolicy {
	return &routev3.RouteAction_RequestMirrorPolicy{
		Cluster:                       t.cluster(d),
		RuntimeFraction:               &corev3.RuntimeFractionalPercent{DefaultValue: frac},
		TraceSampled:                  falseValue,
		DisableShadowHostSuffixAppend: true,
	}
}

// mirrorFraction is the share of requests mirrored: nil for none.
func mirrorFraction(pct *networkingv1.Percent, legacy *wrapperspb.UInt32Value) *typev3.FractionalPercent {
	num, den, ok := mirrorShare(pct, legacy)
	if !ok {
		return nil
	}
	return &typev3.FractionalPercent{Numerator: num, Denominator: den}
}

// mirrorShare is mirrorFraction's numerator and denominator; ok false
// for none.
func mirrorShare(pct *networkingv1.Percent, legacy *wrapperspb.UInt32Value) (uint32, typev3.FractionalPercent_DenominatorType, bool) {
	switch {
	case pct != nil:
		if pct.GetValue() > 0 {
			return percentMillionths(pct), typev3.FractionalPercent_MILLION, true
		}
		return 0, 0, false
	case legacy != nil:
		if legacy.GetValue() > 0 {
			return legacy.GetValue(), typev3.FractionalPercent_HUNDRED, true
		}
		return 0, 0, false
	}
	return 100, typev3.FractionalPercent_HUNDRED, true
}

// percent is p (0–100, fractional) in millionths, as Istio rounds it.
func percent(p *networkingv1.Percent) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: percentMillionths(p), Denominator: typev3.FractionalPercent_MILLION}
}

func percentMillionths(p *networkingv1.Percent) uint32 {
	v := p.GetValue()
	// Out-of-range values (the webhook refuses them) are clamped so the
	// conversion stays defined.
	v = min(max(v, 0), 100)
	return uint32(v * 10000)
}

// redirect makes out a redirect, as Istio's ApplyRedirect.
func (t *translator) redirect(out *routev3.Route, r *networkingv1.HTTPRedirect) error {
	rd := &routev3.RedirectAction{HostRedirect: r.GetAuthority()}
	if r.GetPrefixRewrite() != "" {
		rd.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: r.GetPrefixRewrite()}
	} else {
		rd.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: r.GetUri()}
	}
	if r.GetScheme() != "" {
		rd.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: r.GetScheme()}
	}
	if r.GetRedirectPort() != nil {
		switch p := r.GetRedirectPort().(type) {
		case *networkingv1.HTTPRedirect_DerivePort:
			if p.DerivePort == networkingv1.HTTPRedirect_FROM_REQUEST_PORT {
				rd.PortRedirect = t.scope.Port
			}
		case *networkingv1.HTTPRedirect_Port:
			rd.PortRedirect = p.Port
		}
		scheme := r.GetScheme()
		if scheme == "" {
			scheme = "http"
			if t.scope.TLS {
				scheme = "https"
			}
		}
		if (rd.PortRedirect == 80 && scheme == "http") || (rd.PortRedirect == 443 && scheme == "https") {
			rd.PortRedirect = 0
		}
	}
	switch r.GetRedirectCode() {
	case 0, 301:
		rd.ResponseCode = routev3.RedirectAction_MOVED_PERMANENTLY
	case 302:
		rd.ResponseCode = routev3.RedirectAction_FOUND
	case 303:
		rd.ResponseCode = routev3.RedirectAction_SEE_OTHER
	case 307:
		rd.ResponseCode = routev3.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		rd.ResponseCode = routev3.RedirectAction_PERMANENT_REDIRECT
	default:
		// Istio sends such a route with no action, which Envoy refuses.
		return fmt.Errorf("redirect code %d is not supported", r.GetRedirectCode())
	}
	out.Action = &routev3.Route_Redirect{Redirect: rd}
	return nil
}

func directResponse(out *routev3.Route, d *networkingv1.HTTPDirectResponse) {
	dr := &routev3.DirectResponseAction{Status: d.GetStatus()}
	switch b := d.GetBody().GetSpecifier().(type) {
	case *networkingv1.HTTPBody_String_:
		dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.String_}}
	case *networkingv1.HTTPBody_Bytes:
		dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b.Bytes}}
	}
	out.Action = &routev3.Route_DirectResponse{DirectResponse: dr}
}

type headerOperations struct {
	reqAdd, respAdd       []*corev3.HeaderValueOption
	reqRemove, respRemove []string
	authority             string
}

// headerOps translates header operations as Istio's
// TranslateHeadersOperations: "set" overwrites, "add" appends, each sorted
// by name; pseudo-headers and Host are not touched, but a request Host or
// :authority (from "set" over "add") rewrites the authority.
func headerOps(h *networkingv1.Headers) (headerOperations, error) {
	req, resp := h.GetRequest(), h.GetResponse()
	if n := len(req.GetSet()) + len(req.GetAdd()) + len(req.GetRemove()) + len(resp.GetSet()) + len(resp.GetAdd()) + len(resp.GetRemove()); n > MaxHeaderOps {
		return headerOperations{}, fmt.Errorf("%d header operations, more than %d", n, MaxHeaderOps)
	}
	var ops headerOperations
	set, setAuth := headerValues(req.GetSet(), false)
	add, addAuth := headerValues(req.GetAdd(), true)
	ops.reqAdd = append(set, add...)
	set, _ = headerValues(resp.GetSet(), false)
	add, _ = headerValues(resp.GetAdd(), true)
	ops.respAdd = append(set, add...)
	ops.authority = cmp.Or(setAuth, addAuth)
	ops.reqRemove = dropInternal(req.GetRemove())
	ops.respRemove = dropInternal(resp.GetRemove())
	return ops, nil
}

func internalHeader(k string) bool { return strings.HasPrefix(k, ":") || strings.EqualFold(k, "host") }

func headerValues(hs map[string]string, appendValue bool) ([]*corev3.HeaderValueOption, string) {
	if len(hs) == 0 {
		return nil, ""
	}
	action := corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	if appendValue {
		action = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
	}
	var out []*corev3.HeaderValueOption
	authority := ""
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		if strings.EqualFold(k, ":authority") || strings.EqualFold(k, "host") {
			authority = hs[k]
		}
		if internalHeader(k) {
			continue
		}
		out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: hs[k]}, AppendAction: action})
	}
	return out, authority
}

func dropInternal(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !internalHeader(k) {
			out = append(out, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return out
}

// retryPolicy is Istio's retry.ConvertPolicy: the default policy when
// in is nil (one policy shared by every such route: not to be changed),
// none when it has no attempts.
func retryPolicy(in *networkingv1.HTTPRetry, hashed bool) *routev3.RetryPolicy {
	if in == nil {
		if hashed {
			return defaultRetryHashed
		}
		return defaultRetry
	}
	out := istioDefaultRetry(hashed)
	if in.GetAttempts() <= 0 {
		return nil
	}
	out.NumRetries = uint32Value(uint32(in.GetAttempts()))
	if in.GetRetryOn() != "" {
		out.RetryOn, out.RetriableStatusCodes = parseRetryOn(in.GetRetryOn())
		if len(out.RetriableStatusCodes) > 0 && !strings.Contains(out.RetryOn, "retriable-status-codes") {
			out.RetryOn += ",retriable-status-codes"
		}
	}
	if in.GetPerTryTimeout() != nil {
		out.PerTryTimeout = in.GetPerTryTimeout()
	}
	if in.GetRetryIgnorePreviousHosts() != nil {
		out.RetryHostPredicate = nil
		if in.GetRetryIgnorePreviousHosts().GetValue() {
			out.RetryHostPredicate = previousHostsPredicate
		}
	}
	if in.GetRetryRemoteLocalities().GetValue() {
		out.RetryPriority = previousPriorities()
	}
	if in.GetBackoff() != nil {
		out.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: in.GetBackoff()}
	}
	return out
}

// Values routes share: not to be changed.
var (
	trueValue              = wrapperspb.Bool(true)
	falseValue             = wrapperspb.Bool(false)
	previousHostsPredicate = []*routev3.RetryPolicy_RetryHostPredicate{previousHosts()}
	smallUint32s           = func() []*wrapperspb.UInt32Value {
		out := make([]*wrapperspb.UInt32Value, 101)
		for i := range out {
			out[i] = wrapperspb.UInt32(uint32(i))
		}
		return out
	}()
)

// uint32Value is v as a message, shared for 0 to 100 (weights, retry
// attempts): not to be changed.
func uint32Value(v uint32) *wrapperspb.UInt32Value {
	if int(v) < len(smallUint32s) {
		return smallUint32s[v]
	}
	return wrapperspb.UInt32(v)
}

// Istio's default retry policies, with and without another host each
// time, and their wire form.
var (
	defaultRetry           = istioDefaultRetry(false)
	defaultRetryHashed     = istioDefaultRetry(true)
	defaultRetryWire       = mustMarshal(defaultRetry)
	defaultRetryHashedWire = mustMarshal(defaultRetryHashed)
)

func istioDefaultRetry(hashed bool) *routev3.RetryPolicy {
	out := &routev3.RetryPolicy{
		NumRetries:                    wrapperspb.UInt32(2),
		RetryOn:                       "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
		HostSelectionRetryMaxAttempts: 5,
	}
	if !hashed {
		out.RetryHostPredicate = previousHostsPredicate
	}
	return out
}

func mustMarshal(m proto.Message) []byte {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err) // constant input; every test that translates a route runs it
	}
	return raw
}

// parseRetryOn splits Istio's retryOn into Envoy's conditions and the
// HTTP status codes among them.
func parseRetryOn(s string) (string, []uint32) {
	var conds []string
	codes := []uint32{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if isStatusCode(part) {
			code, _ := strconv.Atoi(part)
			codes = append(codes, uint32(code))
			continue
		}
		conds = append(conds, part)
	}
	return strings.Join(conds, ","), codes
}
