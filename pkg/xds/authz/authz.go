package authz

import (
	"errors"
	"fmt"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbactcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Flavor is the data plane the filters are for.
type Flavor int

const (
	// Envoy is an Envoy sidecar (istio-proxy): Istio's Envoy output.
	Envoy Flavor = iota
	// GRPC is proxyless gRPC: what gRPC-Go's RBAC filter evaluates.
	GRPC
)

func (f Flavor) String() string {
	switch f {
	case Envoy:
		return "Envoy"
	case GRPC:
		return "GRPC"
	}
	return fmt.Sprintf("Flavor(%d)", int(f))
}

// Options select what differs between data planes.
type Options struct {
	// TrustDomain is the mesh's; it names the local trust domain that
	// "cluster.local" in a principal stands for (Envoy), and the one the
	// GRPC flavor requires where namespaces and service accounts grant.
	TrustDomain spiffeid.TrustDomain
	// TrustDomainAliases are the mesh config's trustDomainAliases: on
	// Envoy, a principal of the trust domain, of an alias or of
	// "cluster.local" matches the same identity under each of them, as
	// Istio's trust domain bundle does.
	TrustDomainAliases []string
	Flavor             Flavor
}

func (o Options) check() error {
	if o.TrustDomain.IsZero() {
		return errors.New("authz: no trust domain")
	}
	if o.Flavor != Envoy && o.Flavor != GRPC {
		return fmt.Errorf("authz: unknown flavor %d", int(o.Flavor))
	}
	return nil
}

// Filter names. Envoy takes Istio's names, one per filter type for every
// action; gRPC refuses two HTTP filters of one name, so its DENY filter
// has its own, as Istio's gRPC generator names it.
const (
	HTTPFilterName     = "envoy.filters.http.rbac"
	HTTPDenyFilterName = "envoy.filters.http.rbac.DENY"
	NetworkFilterName  = "envoy.filters.network.rbac"
	// NetworkStatPrefix is Istio's stat prefix of the network filter.
	NetworkStatPrefix = "tcp."
)

// ErrNoNetworkFilters is NetworkFilters' error for the GRPC flavor, which
// has no TCP chains.
var ErrNoNetworkFilters = errors.New("authz: proxyless gRPC has no network filters")

// HTTPFilters returns the RBAC HTTP filters for the policies that select
// a workload, for an HTTP filter chain, in Istio's order: the refusal of
// CUSTOM policies, AUDIT, DENY, ALLOW; none when no policy applies. For
// GRPC the CUSTOM refusal is part of the DENY filter and there is no
// AUDIT filter. Policies that cannot be translated as written fail closed
// (see Check); the error is for a bad Options or a marshalling failure.
func HTTPFilters(policies []*model.AuthorizationPolicy, opts Options) ([]*hcm.HttpFilter, error) {
	custom, rest, err := HTTPFilterGroups(policies, opts)
	return append(custom, rest...), err
}

// HTTPFilterGroups returns HTTPFilters in two groups, where Istio puts
// the jwt_authn filter of RequestAuthentication between them: the refusal
// of CUSTOM policies (Envoy only), then AUDIT, DENY and ALLOW.
func HTTPFilterGroups(policies []*model.AuthorizationPolicy, opts Options) (custom, rest []*hcm.HttpFilter, err error) {
	if err := opts.check(); err != nil {
		return nil, nil, err
	}
	t := translate(policies, opts, false)
	for _, f := range t.filters() {
		name := HTTPFilterName
		if opts.Flavor == GRPC && f.GetAction() == rbacpb.RBAC_DENY {
			name = HTTPDenyFilterName
		}
		cfg, err := marshalAny(&rbachttp.RBAC{Rules: f})
		if err != nil {
			return nil, nil, fmt.Errorf("rbac http filter: %w", err)
		}
		hf := &hcm.HttpFilter{Name: name, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: cfg}}
		if f == t.custom {
			custom = append(custom, hf)
		} else {
			rest = append(rest, hf)
		}
	}
	return custom, rest, nil
}

// NetworkFilters returns the envoy.filters.network.rbac filters for a TCP
// filter chain, to be placed before tcp_proxy, in the order of
// HTTPFilters. Conditions only HTTP can evaluate drop an ALLOW rule and
// are left out of a DENY rule, as Istio does.
func NetworkFilters(policies []*model.AuthorizationPolicy, opts Options) ([]*listener.Filter, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.Flavor == GRPC {
		return nil, ErrNoNetworkFilters
	}
	var out []*listener.Filter
	for _, f := range translate(policies, opts, true).filters() {
		cfg, err := marshalAny(&rbactcp.RBAC{Rules: f, StatPrefix: NetworkStatPrefix})
		if err != nil {
			return nil, fmt.Errorf("rbac network filter: %w", err)
		}
		out = append(out, &listener.Filter{Name: NetworkFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: cfg}})
	}
	return out, nil
}

// Check returns the problems of the policies for the flavor: what is
// invalid or unsupported, and how the filters fail closed on it. They are
// the same for HTTP and TCP chains (HTTP-only fields on a TCP chain are
// expected, not problems).
func Check(policies []*model.AuthorizationPolicy, opts Options) []Problem {
	return translate(policies, opts, false).problems
}

// filters returns the RBAC configurations in filter order.
func (t *translator) filters() []*rbacpb.RBAC {
	var out []*rbacpb.RBAC
	for _, r := range []*rbacpb.RBAC{t.custom, t.audit, t.deny, t.allow} {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// marshalAny marshals deterministically, so that equal policies give
// equal bytes.
func marshalAny(m proto.Message) (*anypb.Any, error) {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}
