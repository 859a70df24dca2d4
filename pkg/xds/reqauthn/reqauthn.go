// Package reqauthn translates Istio RequestAuthentications
// (security.istio.io/v1) into Envoy's envoy.filters.http.jwt_authn filter
// for Envoy sidecars, as Istio's generator does
// (pilot/pkg/security/authn/policy_applier.go):
//
//   - every jwtRule of the RequestAuthentications that select a workload
//     is one provider "origins-<i>", rules sorted by issuer: issuer,
//     audiences, forward (forwardOriginalToken), forward_payload_header
//     (outputPayloadToHeader), claim_to_headers (outputClaimToHeaders),
//     from_headers/from_params/from_cookies, the payload in metadata under
//     "payload" with "scope", "permission" and spaceDelimitedClaims split
//     into lists, and the key set inline (local_jwks);
//   - the requirement, on every path, is for each provider "its token is
//     valid or absent", and with several providers also "one provider's
//     token is valid" (providers may share a location): a token that is
//     present and invalid is refused with 401, a request without one
//     passes, and AuthorizationPolicy decides what it may do (requestPrincipals
//     and request.auth.* match the payload, package authz);
//   - CORS preflight requests pass.
//
// Key sets are fetched by istiod and inlined, Istio's default: a rule's
// inline jwks is used as written, otherwise the key set of its jwksUri (or
// of the issuer's OIDC discovery) that Keys holds. Failing closed: a key
// set that is not held (never fetched, fetch failed) or not valid, and a
// jwksUri or issuer the URL rule refuses (keyfetch.URLRule: plain http to
// a loopback host only where istiod's operator allows it), become
// keyfetch.RejectAllJWKS, which rejects every token of the issuer; never
// a fallback key.
//
// Differences from Istio, on purpose: jwks that hold no usable public
// signing key (Istio passes them as written) and failed fetches (Istio
// inlines a public key whose private half it says it discarded) get
// RejectAllJWKS; fetched key sets reach proxies reduced to their public
// signing keys; Envoy's remote_jwks (PILOT_JWT_ENABLE_REMOTE_JWKS) is not
// offered; a provider Envoy would refuse (a bad header name) is kept with
// its issuer and RejectAllJWKS only, so that one bad rule cannot take the
// listener down.
package reqauthn

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	securityv1 "istio.io/api/security/v1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
)

// FilterName is the jwt_authn filter's name, which authz's matchers read
// the payload under.
const FilterName = authz.JWTFilterName

// Keys are the key sets istiod fetched (keyfetch.JWKSSnapshot).
type Keys interface {
	JWKS(src keyfetch.JWKSSource) (doc string, fetched bool)
}

var _ Keys = (*keyfetch.JWKSSnapshot)(nil)

// Problem is a rule that is not enforced as written, and how it fails
// closed.
type Problem struct {
	Policy model.Meta
	Rule   int // index in spec.jwtRules
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s/%s jwtRules[%d]: %s: tokens of its issuer are refused", p.Policy.Namespace, p.Policy.Name, p.Rule, p.Reason)
}

// rule is a jwtRule with where it comes from.
type rule struct {
	meta  model.Meta
	index int
	spec  *securityv1.JWTRule
}

// rules are the jwtRules of policies, stably sorted by issuer as Istio
// sorts them.
func rules(policies []*model.RequestAuthentication) []rule {
	var out []rule
	for _, p := range policies {
		if p == nil {
			continue
		}
		for i, r := range p.Spec.GetJwtRules() {
			if r != nil {
				out = append(out, rule{meta: p.Meta, index: i, spec: r})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b rule) int { return cmp.Compare(a.spec.GetIssuer(), b.spec.GetIssuer()) })
	return out
}

// Sources returns the key sets istiod must fetch for policies: those of
// rules without inline jwks whose key set rule lets istiod fetch.
func Sources(policies []*model.RequestAuthentication, rule keyfetch.URLRule) []keyfetch.JWKSSource {
	var out []keyfetch.JWKSSource
	for _, r := range rules(policies) {
		if src, ok := source(r.spec); ok && rule.CheckSource(src) == nil && !slices.Contains(out, src) {
			out = append(out, src)
		}
	}
	return out
}

// source is where r's key set is fetched from; false when it has inline
// jwks or names nothing to fetch.
func source(r *securityv1.JWTRule) (keyfetch.JWKSSource, bool) { return policy.JWTKeySource(r) }

// Filter returns the jwt_authn filter for the RequestAuthentications that
// select a workload, nil when they have no rule, and the rules that fail
// closed; rule is what their key sets may be fetched from. The error is
// a marshalling failure.
func Filter(policies []*model.RequestAuthentication, keys Keys, rule keyfetch.URLRule) (*hcm.HttpFilter, []Problem, error) {
	cfg, problems := Config(policies, keys, rule)
	if cfg == nil {
		return nil, problems, nil
	}
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, cfg, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, problems, fmt.Errorf("jwt_authn filter: %w", err)
	}
	return &hcm.HttpFilter{Name: FilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}}, problems, nil
}

// Config is the filter's configuration, nil when policies have no rule.
func Config(policies []*model.RequestAuthentication, keys Keys, rule keyfetch.URLRule) (*jwtauthn.JwtAuthentication, []Problem) {
	rs := rules(policies)
	if len(rs) == 0 {
		return nil, nil
	}
	var problems []Problem
	providers := make(map[string]*jwtauthn.JwtProvider, len(rs))
	var each, anyOf []*jwtauthn.JwtRequirement
	for i, r := range rs {
		name := "origins-" + strconv.Itoa(i)
		p, reason := provider(r.spec, keys, rule)
		if reason != "" {
			problems = append(problems, Problem{Policy: r.meta, Rule: r.index, Reason: reason})
		}
		providers[name] = p
		each = append(each, requiresAny(providerReq(name), &jwtauthn.JwtRequirement{
			RequiresType: &jwtauthn.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}},
		}))
		anyOf = append(anyOf, providerReq(name))
	}
	req := each[0]
	if len(each) > 1 {
		req = requiresAny(append(anyOf, &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_RequiresAll{
			RequiresAll: &jwtauthn.JwtRequirementAndList{Requirements: each},
		}})...)
	}
	return &jwtauthn.JwtAuthentication{
		Providers: providers,
		Rules: []*jwtauthn.RequirementRule{{
			Match:           &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			RequirementType: &jwtauthn.RequirementRule_Requires{Requires: req},
		}},
		BypassCorsPreflight: true,
	}, problems
}

func providerReq(name string) *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_ProviderName{ProviderName: name}}
}

func requiresAny(rs ...*jwtauthn.JwtRequirement) *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_RequiresAny{
		RequiresAny: &jwtauthn.JwtRequirementOrList{Requirements: rs},
	}}
}

// provider is the rule's provider, and why its key set rejects every
// token when it does.
func provider(r *securityv1.JWTRule, keys Keys, rule keyfetch.URLRule) (*jwtauthn.JwtProvider, string) {
	jwks, reason := keySet(r, keys, rule)
	p := &jwtauthn.JwtProvider{
		Issuer:               r.GetIssuer(),
		Audiences:            r.GetAudiences(),
		Forward:              r.GetForwardOriginalToken(),
		ForwardPayloadHeader: r.GetOutputPayloadToHeader(),
		PayloadInMetadata:    authz.JWTPayloadKey,
		NormalizePayloadInMetadata: &jwtauthn.JwtProvider_NormalizePayload{
			SpaceDelimitedClaims: spaceDelimited(r.GetSpaceDelimitedClaims()),
		},
		FromParams:  r.GetFromParams(),
		FromCookies: r.GetFromCookies(),
	}
	for _, c := range r.GetOutputClaimToHeaders() {
		p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtauthn.JwtClaimToHeader{HeaderName: c.GetHeader(), ClaimName: c.GetClaim()})
	}
	for _, h := range r.GetFromHeaders() {
		p.FromHeaders = append(p.FromHeaders, &jwtauthn.JwtHeader{Name: h.GetName(), ValuePrefix: h.GetPrefix()})
	}
	p.JwksSourceSpecifier = localJWKS(jwks)
	if err := p.ValidateAll(); err != nil {
		// Envoy would refuse the listener: keep only what cannot be
		// wrong, so that the issuer's tokens are refused where Envoy
		// looks by default.
		return &jwtauthn.JwtProvider{
			Issuer:              r.GetIssuer(),
			PayloadInMetadata:   authz.JWTPayloadKey,
			JwksSourceSpecifier: localJWKS(keyfetch.RejectAllJWKS),
		}, "Envoy would refuse the rule (" + firstLine(err.Error()) + ")"
	}
	return p, reason
}

func localJWKS(doc string) *jwtauthn.JwtProvider_LocalJwks {
	return &jwtauthn.JwtProvider_LocalJwks{LocalJwks: &core.DataSource{
		Specifier: &core.DataSource_InlineString{InlineString: doc},
	}}
}

// keySet is the key set to inline for r, and why it rejects every token
// when it is RejectAllJWKS: package policy's rule for where a key set
// comes from (policy.CheckJWTKeySource, which the webhook follows too),
// then whether it has been fetched.
func keySet(r *securityv1.JWTRule, keys Keys, rule keyfetch.URLRule) (string, string) {
	if p := policy.CheckJWTKeySource(r, rule); p != nil {
		return keyfetch.RejectAllJWKS, p.Reason
	}
	if j := r.GetJwks(); j != "" {
		return j, ""
	}
	src, _ := source(r)
	if keys == nil {
		return keyfetch.RejectAllJWKS, "its key set has not been fetched"
	}
	doc, ok := keys.JWKS(src)
	if !ok {
		return keyfetch.RejectAllJWKS, "its key set has not been fetched"
	}
	return doc, ""
}

// spaceDelimited is Istio's list: "permission" and "scope" always, with
// the rule's own claims, sorted and without duplicates.
func spaceDelimited(extra []string) []string {
	if extra == nil {
		return []string{"permission", "scope"}
	}
	out := append(slices.Clone(extra), "permission", "scope")
	slices.Sort(out)
	return slices.Compact(out)
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' || s[i] == ';' {
			return s[:i]
		}
	}
	return s
}
