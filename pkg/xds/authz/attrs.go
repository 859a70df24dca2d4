package authz

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
)

// attr is an attribute a rule can test: a field of from.source or
// to.operation, or a `when` key (most fields have a `when` twin, e.g.
// ipBlocks and "source.ip"). Exactly one of principal and permission is set:
// attributes of the peer become RBAC principals, those of the request or
// connection permissions, as Istio places them.
type attr struct {
	key string // Istio's `when` key, or the field's name when it has none
	// httpOnly attributes cannot be evaluated on a TCP chain.
	httpOnly bool
	// identity attributes test the peer's authenticated identity: in a
	// DENY rule they also match a peer without one.
	identity bool
	// grpc is whether the GRPC flavor translates the field (it translates
	// no `when` condition); grpcgen never translated the others, and gRPC
	// cannot evaluate some of them.
	grpc bool
	// jwt attributes read the verified token's payload, which only Envoy's
	// jwt_authn filter provides.
	jwt bool
	// Which keys and values are valid is package policy's rule
	// (policy.CheckConditionKey, policy.CheckRuleValue).
	principal  func(g gen, v string) (*rbacpb.Principal, error)
	permission func(g gen, v string) (*rbacpb.Permission, error)
}

// gen is what a value's translation depends on besides the value.
type gen struct {
	opts      Options
	namespace string // the policy's, for service accounts without one
	key       string // the `when` key as written, for headers and metadata
	// grant is whether matching the value grants access: a value of an
	// ALLOW rule or a not-value of a DENY rule.
	grant bool
}

func (g gen) td() string { return g.opts.TrustDomain.Name() }

var (
	attrPrincipal = &attr{key: "source.principal", identity: true, grpc: true, principal: principalOf}
	attrNamespace = &attr{key: "source.namespace", identity: true, grpc: true, principal: namespaceOf}
	attrSA        = &attr{key: "source.serviceAccount", identity: true, grpc: true, principal: serviceAccountOf}
	attrTD        = &attr{key: "source.trustDomain", identity: true, principal: trustDomainOf}
	attrSourceIP  = &attr{key: "source.ip", principal: sourceIPOf}
	attrRemoteIP  = &attr{key: "remote.ip", principal: remoteIPOf}
	// The request.auth attributes read the payload of the token the
	// RequestAuthentication's jwt_authn filter verified (reqauth.go).
	attrReqPrincipal = &attr{jwt: true, key: "request.auth.principal", httpOnly: true, principal: requestPrincipalOf}
	attrReqAudiences = &attr{jwt: true, key: "request.auth.audiences", httpOnly: true, principal: claimOf("aud")}
	attrReqPresenter = &attr{jwt: true, key: "request.auth.presenter", httpOnly: true, principal: claimOf("azp")}
	attrReqClaims    = &attr{jwt: true, key: "request.auth.claims", httpOnly: true, principal: claimsOf}
	attrHeader       = &attr{key: "request.headers", httpOnly: true, principal: headerOf}
	attrHost         = &attr{key: "hosts", httpOnly: true, permission: hostOf}
	attrMethod       = &attr{key: "methods", httpOnly: true, grpc: true, permission: methodOf}
	attrPath         = &attr{key: "paths", httpOnly: true, grpc: true, permission: pathOf}
	attrPort         = &attr{key: "destination.port", grpc: true, permission: portOf}
	attrDestIP       = &attr{key: "destination.ip", permission: destIPOf}
	attrSNI          = &attr{key: "connection.sni", permission: sniOf}
	attrMetadata     = &attr{key: "experimental.envoy.filters.", permission: metadataOf}
)

// whenAttr returns the attribute of a `when` key, nil for a key Istio does
// not know.
func whenAttr(key string) *attr {
	for _, a := range []*attr{attrPrincipal, attrNamespace, attrSA, attrTD, attrSourceIP, attrRemoteIP, attrPort, attrDestIP, attrSNI,
		attrReqPrincipal, attrReqAudiences, attrReqPresenter} {
		if key == a.key {
			return a
		}
	}
	switch {
	case strings.HasPrefix(key, attrHeader.key):
		return attrHeader
	case strings.HasPrefix(key, attrMetadata.key):
		return attrMetadata
	case strings.HasPrefix(key, attrReqClaims.key):
		return attrReqClaims
	}
	return nil
}

func principalOf(g gen, v string) (*rbacpb.Principal, error) {
	if g.opts.Flavor != Envoy {
		return authenticated(spiffeWildcard(v)), nil
	}
	bundle := append([]string{g.td()}, g.opts.TrustDomainAliases...)
	var ids []*rbacpb.Principal
	for _, p := range inTrustDomains(v, bundle) {
		ids = append(ids, authenticated(spiffeWildcard(p)))
	}
	if len(ids) == 1 {
		return ids[0], nil
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_OrIds{OrIds: &rbacpb.Principal_Set{Ids: ids}}}, nil
}

// inTrustDomains is a principal "<td>/ns/<ns>/sa/<sa>" under each trust
// domain of bundle (the mesh's, then its aliases), as Istio's Envoy
// generator rewrites it: when its trust domain is "cluster.local" (Istio's
// name for the local one) or matches one of bundle (either side may carry
// a leading or trailing "*"), it stands for the same identity under every
// one of them; a bundle domain its own "*suffix" matches keeps it as
// written. Any other principal is left as it is.
func inTrustDomains(principal string, bundle []string) []string {
	parts := strings.Split(principal, "/")
	if len(parts) != 5 || parts[0] == "*" {
		return []string{principal}
	}
	from := parts[0]
	if from != "cluster.local" && !slices.ContainsFunc(bundle, func(td string) bool { return trustDomainMatch(from, td) }) {
		return []string{principal}
	}
	var out []string
	for _, td := range bundle {
		p := principal
		if !suffixMatch(td, from) {
			p = td + "/" + strings.Join(parts[1:], "/")
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// trustDomainMatch is whether trust domains a and b, either of which may
// have a leading or trailing "*", can name the same domain.
func trustDomainMatch(a, b string) bool {
	return a == b || b == "*" || prefixMatch(a, b) || prefixMatch(b, a) || suffixMatch(a, b) || suffixMatch(b, a)
}

func prefixMatch(s, pattern string) bool {
	p, ok := strings.CutSuffix(pattern, "*")
	return ok && strings.HasPrefix(s, p)
}

func suffixMatch(s, pattern string) bool {
	p, ok := strings.CutPrefix(pattern, "*")
	return ok && strings.HasSuffix(s, p)
}

// namespaceOf matches SPIFFE IDs whose path holds /ns/<namespace>/, "*" in
// the namespace matching any text. Istio writes this as a regular
// expression; without "*" it is the same as containing the text. Where
// matching grants access on gRPC the ID must also be ours
// (spiffe://<td>/ns/<namespace>/sa/...), as grpcgen has always required.
func namespaceOf(g gen, v string) (*rbacpb.Principal, error) {
	pinned := g.grant && g.opts.Flavor == GRPC
	parts := strings.Split(v, "*")
	if len(parts) == 1 {
		if pinned {
			return authenticated(prefix("spiffe://"+g.td()+"/ns/"+v+"/sa/", false)), nil
		}
		return authenticated(contains("/ns/" + v + "/")), nil
	}
	var pieces []piece
	if pinned {
		pieces = append(pieces, literal("spiffe://"+g.td()+"/ns/"))
	} else {
		pieces = append(pieces, anyText, literal("/ns/"))
	}
	for i, p := range parts {
		if i > 0 {
			pieces = append(pieces, anyText)
		}
		pieces = append(pieces, literal(p))
	}
	if pinned {
		pieces = append(pieces, literal("/sa/"), anyText)
	} else {
		pieces = append(pieces, literal("/"), anyText)
	}
	return authenticated(safeRegex(pieces...)), nil
}

// serviceAccountOf matches "<ns>/<sa>" or "<sa>" (of the policy's
// namespace): Istio's pattern allows any trust domain and extra path
// segments; where matching grants access on gRPC only our canonical ID
// matches, as in grpcgen.
func serviceAccountOf(g gen, v string) (*rbacpb.Principal, error) {
	ns, sa, ok := strings.Cut(v, "/")
	if !ok {
		ns, sa = g.namespace, v
	}
	if g.grant && g.opts.Flavor == GRPC {
		return authenticated(exact("spiffe://"+g.td()+"/ns/"+ns+"/sa/"+sa, false)), nil
	}
	return authenticated(safeRegex(literal("spiffe://"), someText, literal("/ns/"+ns+"/"), optionalPath,
		literal("sa/"+sa), optionalTail)), nil
}

func trustDomainOf(_ gen, v string) (*rbacpb.Principal, error) {
	before, after, wild := strings.Cut(v, "*")
	switch {
	case v == "*":
		return authenticated(prefix("spiffe://", false)), nil
	case !wild:
		return authenticated(prefix("spiffe://"+v+"/", false)), nil
	}
	return authenticated(safeRegex(literal("spiffe://"+before), segmentText, literal(after+"/"), anyText)), nil
}

func sourceIPOf(_ gen, v string) (*rbacpb.Principal, error) {
	c, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_DirectRemoteIp{DirectRemoteIp: c}}, nil
}

func remoteIPOf(_ gen, v string) (*rbacpb.Principal, error) {
	c, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_RemoteIp{RemoteIp: c}}, nil
}

// headerName returns NAME of "request.headers[NAME]".
func headerName(key string) (string, error) {
	s := strings.TrimPrefix(key, "request.headers")
	if len(s) < 3 || s[0] != '[' || s[len(s)-1] != ']' {
		return "", fmt.Errorf("key %q is not of the form request.headers[<name>]", key)
	}
	name := s[1 : len(s)-1]
	if strings.ContainsAny(name, "\x00\r\n") {
		return "", fmt.Errorf("bad header name %q", name)
	}
	return name, nil
}

func headerOf(g gen, v string) (*rbacpb.Principal, error) {
	name, err := headerName(g.key)
	if err != nil {
		return nil, err
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: headerMatch(name, v, false)}}, nil
}

func hostOf(_ gen, v string) (*rbacpb.Permission, error) {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: headerMatch(":authority", v, true)}}, nil
}

func methodOf(_ gen, v string) (*rbacpb.Permission, error) {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: headerMatch(":method", v, false)}}, nil
}

func portOf(_ gen, v string) (*rbacpb.Permission, error) {
	p, err := port(v)
	if err != nil {
		return nil, err
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: p}}, nil
}

func destIPOf(_ gen, v string) (*rbacpb.Permission, error) {
	c, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationIp{DestinationIp: c}}, nil
}

func sniOf(_ gen, v string) (*rbacpb.Permission, error) {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_RequestedServerName{RequestedServerName: wildcard(v)}}, nil
}

var errEmpty = errors.New("empty value")
