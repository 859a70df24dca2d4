package routes

import (
	"fmt"
	"strings"

	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
)

// claimPrefix starts a header name that matches a claim of the request's
// verified JWT, not a header (Istio's "@request.auth.claims.a.b" or
// "@request.auth.claims[a][b]", prefix in any case).
const claimPrefix = "@request.auth.claims"

// maxClaimDepth bounds the nesting of a claim path.
const maxClaimDepth = 16

// claimPath returns the claims of a claim header name, ok false when name
// is not one. A name with the prefix but neither form is not a claim:
// Istio then matches it as a header, which Envoy refuses.
func claimPath(name string) ([]string, bool) {
	if !strings.HasPrefix(strings.ToLower(name), claimPrefix) {
		return nil, false
	}
	rest := name[len(claimPrefix):]
	switch {
	case strings.HasPrefix(rest, ".") && len(rest) > 1:
		return strings.Split(rest[1:], "."), true
	case strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]") && len(rest) > 2:
		return strings.Split(rest[1:len(rest)-1], "]["), true
	}
	return nil, false
}

// claimMatch is the dynamic-metadata matcher of a claim (the jwt_authn
// filter's payload at path), a string or a list holding one that sm
// matches, as Istio's MetadataMatcherForJWTClaims.
func claimMatch(path []string, sm *networkingv1.StringMatch, rs *regexes) (*matcherv3.MetadataMatcher, error) {
	if len(path) > maxClaimDepth {
		return nil, fmt.Errorf("claim path of %d names, more than %d", len(path), maxClaimDepth)
	}
	s, err := stringMatcher(sm, rs)
	if err != nil {
		return nil, err
	}
	if s == nil {
		// Istio sends a matcher without a value, which Envoy refuses.
		return nil, fmt.Errorf("claim %q without exact, prefix or regex", strings.Join(path, "."))
	}
	segs := []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: authz.JWTPayloadKey}}}
	for _, p := range path {
		segs = append(segs, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: p}})
	}
	value := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: s}}
	list := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{
		MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: value},
	}}}
	return &matcherv3.MetadataMatcher{
		Filter: authz.JWTFilterName,
		Path:   segs,
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{
			ValueMatchers: []*matcherv3.ValueMatcher{list, value},
		}}},
	}, nil
}
