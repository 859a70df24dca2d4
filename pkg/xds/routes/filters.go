package routes

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonfaultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"
)

// Names of the HTTP filters whose per-route configuration a route carries.
const (
	FaultFilter = "envoy.filters.http.fault"
	CORSFilter  = "envoy.filters.http.cors"
)

func toAny(m proto.Message) (*anypb.Any, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	return a, nil
}

// perFilter adds the fault and CORS per-route configuration of rule.
func perFilter(out *routev3.Route, rule *networkingv1.HTTPRoute, rs *regexes) error {
	out.TypedPerFilterConfig = map[string]*anypb.Any{}
	if f := rule.GetFault(); f != nil {
		a, err := toAny(fault(f))
		if err != nil {
			return err
		}
		out.TypedPerFilterConfig[FaultFilter] = a
	}
	if c := rule.GetCorsPolicy(); c != nil {
		p, err := cors(c, rs)
		if err != nil {
			return err
		}
		a, err := toAny(p)
		if err != nil {
			return err
		}
		out.TypedPerFilterConfig[CORSFilter] = a
	}
	return nil
}

// fault is Istio's TranslateFault; an empty HTTPFault when neither delay
// nor abort translates (Istio then sends an empty configuration too).
func fault(in *networkingv1.HTTPFaultInjection) *faultv3.HTTPFault {
	out := &faultv3.HTTPFault{}
	if d := in.GetDelay(); d != nil {
		out.Delay = &commonfaultv3.FaultDelay{}
		if d.GetPercentage() != nil {
			out.Delay.Percentage = percent(d.GetPercentage())
		} else {
			//nolint:staticcheck // the deprecated integer percent is still honoured, as Istio does
			out.Delay.Percentage = &typev3.FractionalPercent{Numerator: uint32(max(d.GetPercent(), 0)), Denominator: typev3.FractionalPercent_HUNDRED}
		}
		if fd, ok := d.GetHttpDelayType().(*networkingv1.HTTPFaultInjection_Delay_FixedDelay); ok {
			out.Delay.FaultDelaySecifier = &commonfaultv3.FaultDelay_FixedDelay{FixedDelay: fd.FixedDelay}
		} else {
			out.Delay = nil
		}
	}
	if a := in.GetAbort(); a != nil {
		out.Abort = &faultv3.FaultAbort{}
		if a.GetPercentage() != nil {
			out.Abort.Percentage = percent(a.GetPercentage())
		}
		switch e := a.GetErrorType().(type) {
		case *networkingv1.HTTPFaultInjection_Abort_HttpStatus:
			out.Abort.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networkingv1.HTTPFaultInjection_Abort_GrpcStatus:
			out.Abort.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: grpcStatus[e.GrpcStatus]}
		default:
			out.Abort = nil
		}
	}
	if out.Delay == nil && out.Abort == nil {
		return nil
	}
	return out
}

// grpcStatus are gRPC's status codes by name (Istio's SupportedGRPCStatus).
var grpcStatus = map[string]uint32{
	"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
	"ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
	"ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
	"DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

// cors is Istio's TranslateCORSPolicy.
func cors(in *networkingv1.CorsPolicy, rs *regexes) (*corsv3.CorsPolicy, error) {
	out := &corsv3.CorsPolicy{
		ForwardNotMatchingPreflights: wrapperspb.Bool(in.GetUnmatchedPreflights() != networkingv1.CorsPolicy_IGNORE),
		FilterEnabled: &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{
			Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED,
		}},
		AllowCredentials: in.GetAllowCredentials(),
		AllowHeaders:     strings.Join(in.GetAllowHeaders(), ","),
		AllowMethods:     strings.Join(in.GetAllowMethods(), ","),
		ExposeHeaders:    strings.Join(in.GetExposeHeaders(), ","),
	}
	if len(in.GetAllowOrigins()) > MaxMatchFields {
		return nil, fmt.Errorf("corsPolicy: %d origins, more than %d", len(in.GetAllowOrigins()), MaxMatchFields)
	}
	//nolint:staticcheck // the deprecated allowOrigin is still honoured, as Istio does
	legacy := in.GetAllowOrigin()
	if in.GetAllowOrigins() != nil {
		out.AllowOriginStringMatch = []*matcherv3.StringMatcher{}
		for _, o := range in.GetAllowOrigins() {
			s, err := stringMatcher(o, rs)
			if err != nil {
				return nil, fmt.Errorf("corsPolicy origin: %w", err)
			}
			if s != nil {
				out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, s)
			}
		}
	} else if legacy != nil {
		if len(legacy) > MaxMatchFields {
			return nil, fmt.Errorf("corsPolicy: %d origins, more than %d", len(legacy), MaxMatchFields)
		}
		for _, o := range legacy {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: o}})
		}
	}
	if in.GetMaxAge() != nil {
		out.MaxAge = strconv.FormatInt(in.GetMaxAge().GetSeconds(), 10)
	}
	return out, nil
}

// previousHostsType is the type URL of an empty PreviousHostsPredicate,
// whose encoding is empty.
var previousHostsType = "type.googleapis.com/" + string((&previoushostsv3.PreviousHostsPredicate{}).ProtoReflect().Descriptor().FullName())

func previousHosts() *routev3.RetryPolicy_RetryHostPredicate {
	return &routev3.RetryPolicy_RetryHostPredicate{
		Name:       "envoy.retry_host_predicates.previous_hosts",
		ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: previousHostsType}},
	}
}

func previousPriorities() *routev3.RetryPolicy_RetryPriority {
	a, _ := anypb.New(&previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: 2}) // a fixed message always marshals
	return &routev3.RetryPolicy_RetryPriority{
		Name:       "envoy.retry_priorities.previous_priorities",
		ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: a},
	}
}

// hashPolicy is the consistent-hash policy the DestinationRule of d's host
// (as the proxy's namespace sees it) asks for: the subset's port-level
// setting, else the subset's, else the rule's port-level, else the rule's
// (Istio's HashForHTTPDestination); nil for none.
func (t *translator) hashPolicy(d *networkingv1.Destination) *routev3.RouteAction_HashPolicy {
	return hashPolicyOf(t.hashFor(d))
}

// hashFor is the consistent hash hashPolicy translates (nil for none),
// noting in t.deps the DestinationRule it reads.
func (t *translator) hashFor(d *networkingv1.Destination) *networkingv1.LoadBalancerSettings_ConsistentHashLB {
	host := fqdn(t.snap, d.GetHost(), t.vs.Namespace)
	dr := ruleFor(t.snap, host, t.scope.Proxy)
	if t.deps != nil && !t.deps.readRule(host) {
		t.deps.rules = append(t.deps.rules, ruleRead{host: host, rule: dr})
	}
	if dr == nil || dr.Spec == nil {
		return nil
	}
	portHash := func(pls []*networkingv1.TrafficPolicy_PortTrafficPolicy) *networkingv1.LoadBalancerSettings_ConsistentHashLB {
		if d.GetPort() == nil {
			return nil
		}
		for _, s := range pls {
			if s.GetPort().GetNumber() == d.GetPort().GetNumber() {
				return s.GetLoadBalancer().GetConsistentHash()
			}
		}
		return nil
	}
	tp := dr.Spec.GetTrafficPolicy()
	hash := tp.GetLoadBalancer().GetConsistentHash()
	plsHash := portHash(tp.GetPortLevelSettings())
	var subsetHash, subsetPLSHash *networkingv1.LoadBalancerSettings_ConsistentHashLB
	for _, s := range dr.Spec.GetSubsets() {
		if s.GetName() == d.GetSubset() {
			subsetHash = s.GetTrafficPolicy().GetLoadBalancer().GetConsistentHash()
			subsetPLSHash = portHash(s.GetTrafficPolicy().GetPortLevelSettings())
			break
		}
	}
	switch {
	case subsetPLSHash != nil:
		hash = subsetPLSHash
	case subsetHash != nil:
		hash = subsetHash
	case plsHash != nil:
		hash = plsHash
	}
	return hash
}

func hashPolicyOf(h *networkingv1.LoadBalancerSettings_ConsistentHashLB) *routev3.RouteAction_HashPolicy {
	switch k := h.GetHashKey().(type) {
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: k.HttpHeaderName},
		}}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		c := &routev3.RouteAction_HashPolicy_Cookie{Name: k.HttpCookie.GetName(), Ttl: k.HttpCookie.GetTtl(), Path: k.HttpCookie.GetPath()}
		for _, a := range k.HttpCookie.GetAttributes() {
			c.Attributes = append(c.Attributes, &routev3.RouteAction_HashPolicy_CookieAttribute{Name: a.GetName(), Value: a.GetValue()})
		}
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: c}}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: k.UseSourceIp},
		}}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: k.HttpQueryParameterName},
		}}
	}
	return nil
}
