package authz

import (
	"errors"
	"fmt"
	"strings"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// Where Envoy's jwt_authn filter leaves the payload of a verified token:
// the RequestAuthentication translation (package reqauthn) names the same
// key, as Istio does.
const (
	JWTFilterName     = "envoy.filters.http.jwt_authn"
	JWTPayloadKey     = "payload"
	maxClaimPathDepth = policy.MaxClaimDepth
)

// requestPrincipalOf matches "<iss>/<sub>" of the verified token, split at
// the last "/" since the issuer may be a URL, with Istio's wildcards: "*"
// any token, "*x" a suffix (of sub, or of iss when the value has a "/"),
// "x*" a prefix (of iss when the value has no "/", of sub otherwise).
// Prefixes and suffixes are never empty here; an empty exact part ("a/")
// matches only an empty claim.
func requestPrincipalOf(_ gen, v string) (*rbacpb.Principal, error) {
	iss, sub, found := v, "", false
	if i := strings.LastIndex(v, "/"); i >= 0 {
		iss, sub, found = v[:i], v[i+1:], true
	}
	anyValue := safeRegex(someText)
	var mIss, mSub *matcher.StringMatcher
	switch {
	case v == "*":
		mIss, mSub = anyValue, anyValue
	case strings.HasPrefix(v, "*") && found:
		mIss, mSub = anyValue, exact(sub, false)
		if iss != "*" {
			mIss = suffix(iss[1:], false)
		}
	case strings.HasPrefix(v, "*"):
		mIss, mSub = anyValue, suffix(v[1:], false)
	case strings.HasSuffix(v, "*") && found:
		mIss, mSub = exact(iss, false), anyValue
		if sub != "*" {
			mSub = prefix(sub[:len(sub)-1], false)
		}
	case strings.HasSuffix(v, "*"):
		mIss, mSub = prefix(v[:len(v)-1], false), anyValue
	default:
		mIss, mSub = exact(iss, false), exact(sub, false)
	}
	return andPrincipals([]*rbacpb.Principal{
		payloadMatch([]string{"iss"}, stringValue(mIss)),
		payloadMatch([]string{"sub"}, stringValue(mSub)),
	}), nil
}

// claimOf matches a claim of the verified token (aud, azp) that is a
// string or a list holding a string, in Istio's string forms.
func claimOf(claim string) func(gen, string) (*rbacpb.Principal, error) {
	return func(_ gen, v string) (*rbacpb.Principal, error) {
		return payloadMatch([]string{claim}, stringOrList(wildcard(v))), nil
	}
}

// claimsOf matches request.auth.claims[a][b]...: the claim at that path
// of the payload (nested objects), a string or a list holding a string.
func claimsOf(g gen, v string) (*rbacpb.Principal, error) {
	path, err := claimPath(g.key)
	if err != nil {
		return nil, err
	}
	return payloadMatch(path, stringOrList(wildcard(v))), nil
}

// claimPath returns the claim names of "request.auth.claims[a][b]...".
// A name is taken as written, dots included ("[kubernetes.io]" is one
// claim); names may not be empty or hold brackets.
func claimPath(key string) ([]string, error) {
	s := strings.TrimPrefix(key, "request.auth.claims")
	if s == "" || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, fmt.Errorf("key %q is not of the form request.auth.claims[<name>]...", key)
	}
	parts := strings.Split(s[1:len(s)-1], "][")
	if len(parts) > maxClaimPathDepth {
		return nil, fmt.Errorf("key %q nests more than %d claims", key, maxClaimPathDepth)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, "[]") {
			return nil, errBadClaim
		}
	}
	return parts, nil
}

var errBadClaim = errors.New("claim name is empty or holds a bracket")

// payloadMatch matches the value at path in the jwt_authn payload.
func payloadMatch(path []string, v *matcher.ValueMatcher) *rbacpb.Principal {
	segs := []*matcher.MetadataMatcher_PathSegment{{Segment: &matcher.MetadataMatcher_PathSegment_Key{Key: JWTPayloadKey}}}
	for _, p := range path {
		segs = append(segs, &matcher.MetadataMatcher_PathSegment{Segment: &matcher.MetadataMatcher_PathSegment_Key{Key: p}})
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Metadata{Metadata: &matcher.MetadataMatcher{
		Filter: JWTFilterName, Path: segs, Value: v,
	}}}
}

func stringValue(m *matcher.StringMatcher) *matcher.ValueMatcher {
	return &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: m}}
}

// stringOrList matches a string, or a list one of whose members matches,
// as Istio's matcher for claims does.
func stringOrList(m *matcher.StringMatcher) *matcher.ValueMatcher {
	list := &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_ListMatch{ListMatch: &matcher.ListMatcher{
		MatchPattern: &matcher.ListMatcher_OneOf{OneOf: stringValue(m)},
	}}}
	return &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_OrMatch{OrMatch: &matcher.OrMatcher{
		ValueMatchers: []*matcher.ValueMatcher{list, stringValue(m)},
	}}}
}
