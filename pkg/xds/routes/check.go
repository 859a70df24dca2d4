package routes

import (
	"errors"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// checkRoute says why Envoy's validation of its route configuration
// would refuse r, a route the translation built, or nil. It applies
// Envoy's rules (the protoc-gen-validate rules of the v3 API, which
// ValidateAll runs) to what a VirtualService decides: header names and
// values, string matchers, path regexes, rewrites, the clusters of a
// weighted split; a part the translation builds from constants or
// from names this package made (cluster names, retry predicates,
// decorators, metadata) is not checked again on each route: the tests
// run ValidateAll on every route of random VirtualServices and of the
// fuzz targets, which is what proves that such parts are valid. A
// part this translation rarely builds (a redirect, a direct response, a
// hash policy, a claim match, a retry back-off, a regex rewrite) is
// checked by its own ValidateAll.
func checkRoute(r *routev3.Route) error {
	if r.Match == nil {
		return errors.New("no match")
	}
	if err := checkMatch(r.Match); err != nil {
		return fmt.Errorf("match: %w", err)
	}
	if err := checkHeaderOps(r.RequestHeadersToAdd, r.RequestHeadersToRemove, r.ResponseHeadersToAdd, r.ResponseHeadersToRemove); err != nil {
		return err
	}
	if r.Decorator != nil && r.Decorator.Operation == "" {
		return errors.New("empty decorator operation")
	}
	switch a := r.Action.(type) {
	case *routev3.Route_Route:
		if a.Route == nil {
			return errors.New("no route action")
		}
		return checkAction(a.Route)
	case *routev3.Route_Redirect:
		return a.Redirect.ValidateAll()
	case *routev3.Route_DirectResponse:
		return a.DirectResponse.ValidateAll()
	case nil:
		return errors.New("no action")
	}
	return r.ValidateAll()
}

// headerSafe reports whether s may be a header name or value, a path or
// host rewrite: Envoy's pattern "^[^\x00\n\r]*$".
func headerSafe(s string) bool { return !strings.ContainsAny(s, "\x00\n\r") }

func checkMatch(m *routev3.RouteMatch) error {
	switch p := m.PathSpecifier.(type) {
	case nil:
		return errors.New("no path specifier")
	case *routev3.RouteMatch_Prefix, *routev3.RouteMatch_Path:
	case *routev3.RouteMatch_SafeRegex:
		if p.SafeRegex == nil || p.SafeRegex.Regex == "" || p.SafeRegex.EngineType != nil {
			return m.ValidateAll()
		}
	default:
		return m.ValidateAll()
	}
	if m.Grpc != nil || m.RuntimeFraction != nil || m.TlsContext != nil || len(m.FilterState) > 0 || len(m.Cookies) > 0 {
		return m.ValidateAll()
	}
	for _, h := range m.Headers {
		if err := checkHeaderMatcher(h); err != nil {
			return err
		}
	}
	for _, q := range m.QueryParameters {
		if q == nil || q.Name == "" || len(q.Name) > 1024 {
			return m.ValidateAll()
		}
		switch s := q.QueryParameterMatchSpecifier.(type) {
		case nil, *routev3.QueryParameterMatcher_PresentMatch:
		case *routev3.QueryParameterMatcher_StringMatch:
			if err := checkStringMatcher(s.StringMatch); err != nil {
				return fmt.Errorf("query parameter %q: %w", q.Name, err)
			}
		default:
			return q.ValidateAll()
		}
	}
	for _, d := range m.DynamicMetadata {
		if err := d.ValidateAll(); err != nil {
			return err
		}
	}
	return nil
}

func checkHeaderMatcher(h *routev3.HeaderMatcher) error {
	if h == nil || h.Name == "" || !headerSafe(h.Name) {
		return h.ValidateAll()
	}
	switch s := h.HeaderMatchSpecifier.(type) {
	case nil, *routev3.HeaderMatcher_PresentMatch:
		return nil
	case *routev3.HeaderMatcher_StringMatch:
		if err := checkStringMatcher(s.StringMatch); err != nil {
			return fmt.Errorf("header %q: %w", h.Name, err)
		}
		return nil
	}
	return h.ValidateAll()
}

func checkStringMatcher(s *matcherv3.StringMatcher) error {
	if s == nil {
		return errors.New("no string matcher")
	}
	switch p := s.MatchPattern.(type) {
	case *matcherv3.StringMatcher_Exact:
		return nil
	case *matcherv3.StringMatcher_Prefix:
		if p.Prefix != "" {
			return nil
		}
	case *matcherv3.StringMatcher_SafeRegex:
		if p.SafeRegex != nil && p.SafeRegex.Regex != "" && p.SafeRegex.EngineType == nil {
			return nil
		}
	}
	return s.ValidateAll()
}

// maxHeaderOptions is Envoy's bound on the headers one list adds.
const maxHeaderOptions = 1000

func checkHeaderOps(reqAdd []*corev3.HeaderValueOption, reqRemove []string, respAdd []*corev3.HeaderValueOption, respRemove []string) error {
	for _, add := range [][]*corev3.HeaderValueOption{reqAdd, respAdd} {
		if len(add) > maxHeaderOptions {
			return fmt.Errorf("more than %d headers added", maxHeaderOptions)
		}
		for _, o := range add {
			if err := checkHeaderOption(o); err != nil {
				return err
			}
		}
	}
	for _, remove := range [][]string{reqRemove, respRemove} {
		for _, k := range remove {
			if k == "" || !headerSafe(k) {
				return fmt.Errorf("header %q cannot be removed: not a header name", k)
			}
		}
	}
	return nil
}

func checkHeaderOption(o *corev3.HeaderValueOption) error {
	if o == nil || o.Header == nil {
		return errors.New("header option without a header")
	}
	h := o.Header
	if h.Key == "" || len(h.Key) > 16384 || !headerSafe(h.Key) {
		return fmt.Errorf("header name %q is not one Envoy takes", h.Key)
	}
	if len(h.Value) > 16384 || !headerSafe(h.Value) || len(h.RawValue) > 16384 {
		return fmt.Errorf("the value of header %q is not one Envoy takes", h.Key)
	}
	if _, ok := corev3.HeaderValueOption_HeaderAppendAction_name[int32(o.AppendAction)]; !ok {
		return o.ValidateAll()
	}
	return nil
}

func checkAction(a *routev3.RouteAction) error {
	switch c := a.ClusterSpecifier.(type) {
	case *routev3.RouteAction_Cluster:
		if c.Cluster == "" {
			return errors.New("empty cluster")
		}
	case *routev3.RouteAction_WeightedClusters:
		if c.WeightedClusters == nil || len(c.WeightedClusters.Clusters) == 0 || c.WeightedClusters.RandomValueSpecifier != nil {
			return a.ValidateAll()
		}
		for _, cw := range c.WeightedClusters.Clusters {
			if cw == nil {
				return a.ValidateAll()
			}
			if err := checkHeaderOps(cw.RequestHeadersToAdd, cw.RequestHeadersToRemove, cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove); err != nil {
				return fmt.Errorf("cluster %s: %w", cw.Name, err)
			}
			if h, ok := cw.HostRewriteSpecifier.(*routev3.WeightedCluster_ClusterWeight_HostRewriteLiteral); ok && !headerSafe(h.HostRewriteLiteral) {
				return fmt.Errorf("cluster %s: authority %q is not one Envoy takes", cw.Name, h.HostRewriteLiteral)
			}
		}
	default:
		return a.ValidateAll()
	}
	if !headerSafe(a.PrefixRewrite) {
		return fmt.Errorf("uri rewrite %q is not one Envoy takes", a.PrefixRewrite)
	}
	switch h := a.HostRewriteSpecifier.(type) {
	case nil:
	case *routev3.RouteAction_HostRewriteLiteral:
		if !headerSafe(h.HostRewriteLiteral) {
			return fmt.Errorf("authority %q is not one Envoy takes", h.HostRewriteLiteral)
		}
	default:
		return a.ValidateAll()
	}
	if a.RegexRewrite != nil {
		if err := a.RegexRewrite.ValidateAll(); err != nil {
			return err
		}
	}
	if p := a.RetryPolicy; p != nil && p.RetryBackOff != nil {
		if err := p.RetryBackOff.ValidateAll(); err != nil {
			return err
		}
	}
	for _, hp := range a.HashPolicy {
		if err := hp.ValidateAll(); err != nil {
			return err
		}
	}
	for _, m := range a.RequestMirrorPolicies {
		if m == nil || !headerSafe(m.HostRewriteLiteral) || m.RuntimeFraction == nil {
			return a.ValidateAll()
		}
	}
	return nil
}
