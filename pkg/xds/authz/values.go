package authz

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	uritemplate "github.com/envoyproxy/go-control-plane/envoy/extensions/path/match/uri_template/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// pathOf matches the request path (without query) in Istio's forms,
// including its templates, where "{*}" is one path segment and "{**}" any
// number of them.
func pathOf(g gen, v string) (*rbacpb.Permission, error) {
	if strings.Contains(v, "{*}") || strings.Contains(v, "{**}") {
		if g.opts.Flavor == GRPC {
			return nil, errors.New("gRPC cannot match path templates")
		}
		tmpl, err := pathTemplate(v)
		if err != nil {
			return nil, err
		}
		cfg, err := marshalAny(&uritemplate.UriTemplateMatchConfig{PathTemplate: tmpl})
		if err != nil {
			return nil, err
		}
		return &rbacpb.Permission{Rule: &rbacpb.Permission_UriTemplate{
			UriTemplate: &core.TypedExtensionConfig{Name: "uri-template", TypedConfig: cfg},
		}}, nil
	}
	if strings.ContainsAny(v, "{}") {
		return nil, fmt.Errorf("path %q has '{' or '}' outside {*} and {**}", v)
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{
		UrlPath: &matcher.PathMatcher{Rule: &matcher.PathMatcher_Path{Path: wildcard(v)}},
	}}, nil
}

// pathTemplate checks a path with Istio's templates against both Istio's
// validation and Envoy's template parser, and returns Envoy's form. Each
// segment is "{*}", "{**}" or literal; nothing but literals follows "{**}".
func pathTemplate(v string) (string, error) {
	if !strings.HasPrefix(v, "/") {
		return "", fmt.Errorf("path template %q does not start with /", v)
	}
	body := strings.TrimSuffix(v[1:], "/")
	seenAny := false
	var out strings.Builder
	for _, seg := range strings.Split(body, "/") {
		out.WriteByte('/')
		switch {
		case seg == "{*}" || seg == "{**}":
			if seenAny {
				return "", fmt.Errorf("path template %q has an operator after {**}", v)
			}
			seenAny = seg == "{**}"
			out.WriteString(seg[1 : len(seg)-1])
		case seg == "" || strings.Trim(seg, templateLiteral) != "":
			return "", fmt.Errorf("path template %q has the invalid segment %q", v, seg)
		default:
			out.WriteString(seg)
		}
	}
	if strings.HasSuffix(v[1:], "/") {
		out.WriteByte('/')
	}
	if out.Len() > 256 {
		return "", fmt.Errorf("path template %q is longer than 256 bytes", v)
	}
	return out.String(), nil
}

// templateLiteral are the characters Envoy allows in a template literal.
const templateLiteral = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~%!$&'()+,;:@"

// metadataOf matches Envoy dynamic metadata, for Istio's experimental key
// "experimental.envoy.filters.<filter>[<key>]"; a value "[v]" matches a
// list holding v.
func metadataOf(g gen, v string) (*rbacpb.Permission, error) {
	filter, key, err := metadataKey(g.key)
	if err != nil {
		return nil, err
	}
	value := &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: wildcard(v)}}
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		one := &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: wildcard(strings.Trim(v, "[]"))}}
		value = &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_ListMatch{ListMatch: &matcher.ListMatcher{
			MatchPattern: &matcher.ListMatcher_OneOf{OneOf: one},
		}}}
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Metadata{Metadata: &matcher.MetadataMatcher{
		Filter: filter,
		Path:   []*matcher.MetadataMatcher_PathSegment{{Segment: &matcher.MetadataMatcher_PathSegment_Key{Key: key}}},
		Value:  value,
	}}}, nil
}

func checkMetadataKey(key string) error {
	_, _, err := metadataKey(key)
	return err
}

func metadataKey(k string) (filter, key string, err error) {
	open := strings.Index(k, "[")
	if open <= len("experimental.") || !strings.HasSuffix(k, "]") || open >= len(k)-2 {
		return "", "", fmt.Errorf("key %q is not of the form experimental.envoy.filters.<filter>[<key>]", k)
	}
	return k[len("experimental."):open], k[open+1 : len(k)-1], nil
}

// cidr parses an address or a CIDR block as Istio does: an address is a
// block of its full length.
func cidr(v string) (*core.CidrRange, error) {
	var p netip.Prefix
	if strings.Contains(v, "/") {
		var err error
		if p, err = netip.ParsePrefix(v); err != nil {
			return nil, fmt.Errorf("bad CIDR block %q", v)
		}
	} else {
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("bad IP address %q", v)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return &core.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}, nil
}

func port(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("bad port %q", v)
	}
	return uint32(n), nil
}

// checkServiceAccounts and checkServiceAccount are Istio's validation of
// service accounts, "<sa>" or "<ns>/<sa>".
func checkServiceAccounts(values []string) error {
	if len(values) > 16 {
		return fmt.Errorf("%d service accounts, at most 16 are allowed", len(values))
	}
	return nil
}

func checkServiceAccount(v string) error {
	ns, sa, cut := strings.Cut(v, "/")
	if !cut {
		sa = v
	}
	switch {
	case len(v) > 320:
		return fmt.Errorf("service account longer than 320 bytes")
	case strings.Contains(v, "*"):
		return fmt.Errorf("service account %q has a wildcard", v)
	case strings.Contains(sa, "/") || sa == "" || (cut && ns == ""):
		return fmt.Errorf("service account %q is not <sa> or <namespace>/<sa>", v)
	}
	return nil
}

// checkTrustDomain is Istio's validation of trust domains: a name with at
// most one "*", at its start or end, and no "/".
func checkTrustDomain(v string) error {
	n := strings.Count(v, "*")
	switch {
	case strings.Contains(v, "/"):
		return fmt.Errorf("trust domain %q has a /", v)
	case n > 1 || (n == 1 && v != "*" && !strings.HasPrefix(v, "*") && !strings.HasSuffix(v, "*")):
		return fmt.Errorf("trust domain %q has a wildcard other than at its start or end", v)
	}
	return nil
}
