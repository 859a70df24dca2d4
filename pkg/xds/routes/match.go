package routes

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	networkingv1 "istio.io/api/networking/v1"
)

// routeMatch translates m (nil: every request) as Istio's
// TranslateRouteMatch: headers and withoutHeaders sorted by name, then
// :method, :authority and :scheme; query parameters (sorted by name, where
// Istio leaves map order); the path; case sensitivity always set.
func routeMatch(m *networkingv1.HTTPMatchRequest, rs *regexes) (*routev3.RouteMatch, error) {
	out := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return out, nil
	}
	for _, name := range sortedNames(m.GetHeaders()) {
		if path, ok := claimPath(name); ok {
			md, err := claimMatch(path, m.GetHeaders()[name], rs)
			if err != nil {
				return nil, fmt.Errorf("header %q: %w", name, err)
			}
			out.DynamicMetadata = append(out.DynamicMetadata, md)
			continue
		}
		hm, err := headerMatch(name, m.GetHeaders()[name], rs)
		if err != nil {
			return nil, err
		}
		out.Headers = append(out.Headers, hm)
	}
	for _, name := range sortedNames(m.GetWithoutHeaders()) {
		sm := m.GetWithoutHeaders()[name]
		if path, ok := claimPath(name); ok {
			md, err := claimMatch(path, sm, rs)
			if err != nil {
				return nil, fmt.Errorf("withoutHeaders %q: %w", name, err)
			}
			md.Invert = true
			out.DynamicMetadata = append(out.DynamicMetadata, md)
			continue
		}
		hm, err := headerMatch(name, sm, rs)
		if err != nil {
			return nil, err
		}
		hm.InvertMatch = true
		if !presentMatch(sm) {
			hm.TreatMissingHeaderAsEmpty = true
		}
		out.Headers = append(out.Headers, hm)
	}
	slices.SortStableFunc(out.Headers, func(a, b *routev3.HeaderMatcher) int { return cmp.Compare(a.Name, b.Name) })
	if u := m.GetUri(); u != nil {
		switch p := u.GetMatchType().(type) {
		case *networkingv1.StringMatch_Exact:
			out.PathSpecifier = &routev3.RouteMatch_Path{Path: p.Exact}
		case *networkingv1.StringMatch_Prefix:
			out.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: p.Prefix}
		case *networkingv1.StringMatch_Regex:
			if err := rs.check(p.Regex); err != nil {
				return nil, fmt.Errorf("uri: %w", err)
			}
			out.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: p.Regex}}
		}
	}
	out.CaseSensitive = trueValue
	if m.GetIgnoreUriCase() {
		out.CaseSensitive = falseValue
	}
	for _, pseudo := range []struct {
		name string
		sm   *networkingv1.StringMatch
	}{{":method", m.GetMethod()}, {":authority", m.GetAuthority()}, {":scheme", m.GetScheme()}} {
		if pseudo.sm == nil {
			continue
		}
		hm, err := headerMatch(pseudo.name, pseudo.sm, rs)
		if err != nil {
			return nil, err
		}
		out.Headers = append(out.Headers, hm)
	}
	for _, name := range sortedNames(m.GetQueryParams()) {
		sm := m.GetQueryParams()[name]
		qm := &routev3.QueryParameterMatcher{Name: name}
		if presentMatch(sm) {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		} else {
			s, err := stringMatcher(sm, rs)
			if err != nil {
				return nil, fmt.Errorf("query parameter %q: %w", name, err)
			}
			if s != nil {
				qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: s}
			}
		}
		out.QueryParameters = append(out.QueryParameters, qm)
	}
	return out, nil
}

// headerMatch is Istio's translateHeaderMatch. (A claim of the request's
// JWT, "@request.auth.claims…", is matched in its dynamic metadata by
// claimMatch; any other name is matched as a header, as Istio does.)
func headerMatch(name string, sm *networkingv1.StringMatch, rs *regexes) (*routev3.HeaderMatcher, error) {
	out := &routev3.HeaderMatcher{Name: name}
	if presentMatch(sm) {
		out.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		return out, nil
	}
	s, err := stringMatcher(sm, rs)
	if err != nil {
		return nil, fmt.Errorf("header %q: %w", name, err)
	}
	if s != nil {
		out.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: s}
	}
	return out, nil
}

// presentMatch: no match type, or the regex "*" (not RE2: Istio's
// spelling of "present").
func presentMatch(sm *networkingv1.StringMatch) bool {
	if sm.GetMatchType() == nil {
		return true
	}
	r, ok := sm.GetMatchType().(*networkingv1.StringMatch_Regex)
	return ok && r.Regex == "*"
}

func stringMatcher(sm *networkingv1.StringMatch, rs *regexes) (*matcherv3.StringMatcher, error) {
	switch p := sm.GetMatchType().(type) {
	case *networkingv1.StringMatch_Exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: p.Exact}}, nil
	case *networkingv1.StringMatch_Prefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p.Prefix}}, nil
	case *networkingv1.StringMatch_Regex:
		if err := rs.check(p.Regex); err != nil {
			return nil, err
		}
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: p.Regex}}}, nil
	}
	return nil, nil
}

// sortedNames are m's keys, sorted; nil for none, without allocating.
func sortedNames[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}
