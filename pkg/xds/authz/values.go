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

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// pathOf matches the request path (without query) in Istio's forms,
// including its templates, where "{*}" is one path segment and "{**}" any
// number of them; v has passed package policy's rule for paths.
func pathOf(g gen, v string) (*rbacpb.Permission, error) {
	if policy.IsPathTemplate(v) {
		if g.opts.Flavor == GRPC {
			return nil, errors.New("gRPC cannot match path templates")
		}
		cfg, err := marshalAny(&uritemplate.UriTemplateMatchConfig{PathTemplate: pathTemplate(v)})
		if err != nil {
			return nil, err
		}
		return &rbacpb.Permission{Rule: &rbacpb.Permission_UriTemplate{
			UriTemplate: &core.TypedExtensionConfig{Name: "uri-template", TypedConfig: cfg},
		}}, nil
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{
		UrlPath: &matcher.PathMatcher{Rule: &matcher.PathMatcher_Path{Path: wildcard(v)}},
	}}, nil
}

// pathTemplate is Envoy's form of a template Istio's way: "{*}" and
// "{**}" as "*" and "**".
func pathTemplate(v string) string {
	return strings.NewReplacer("{**}", "**", "{*}", "*").Replace(v)
}

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
