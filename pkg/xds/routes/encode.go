package routes

import (
	"math"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The routes a translation makes are encoded here field by field into
// protobuf's wire format, as proto's deterministic marshalling writes
// them: fields in the order of their numbers, except that the members of
// a oneof come after every other field, oneof by oneof in the order the
// message declares them (protobuf-go keeps the historic order of its
// predecessor), proto3 defaults left out
// (but a oneof's member and a set message always written), map entries
// sorted by key, each with its key and value, strings refused unless
// valid UTF-8. Reflection-driven marshalling costs several times more
// per route; routes are most of what a gateway or a sidecar with many
// VirtualServices is sent. The messages and fields the translation does
// not set (a tracing override, rate limits, ...) are marshalled by proto
// where they occur, which writes the same bytes for a nested message as
// for that message alone. encode_test.go checks the result against
// proto's over many translated configurations and a fuzz target, and
// that every field of the messages encoded here is written.

// MarshalRoute is r in wire form: what proto.MarshalOptions{Deterministic:
// true}.Marshal(r) returns.
func MarshalRoute(r *routev3.Route) ([]byte, error) {
	out, err := MarshalRoutes([]*routev3.Route{r})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// MarshalRoutes is MarshalRoute of each of rs, which may share parts
// (their metadata, as one VirtualService's routes do).
func MarshalRoutes(rs []*routev3.Route) ([][]byte, error) {
	// One buffer for all, each route's bytes a slice of it.
	e := encoder{b: make([]byte, 0, 512*len(rs))}
	ends := make([]int, len(rs))
	for i, r := range rs {
		start := len(e.b)
		if r == nil || !e.route(r) {
			e.b = e.b[:start]
			e.marshalContent(r)
		}
		if e.err != nil {
			return nil, e.err
		}
		ends[i] = len(e.b)
	}
	out := make([][]byte, len(rs))
	start := 0
	for i, end := range ends {
		out[i] = e.b[start:end:end]
		start = end
	}
	return out, nil
}

// AppendVirtualHost appends to b the field num holding virtual host vh,
// as deterministic marshalling writes it; a route whose wire form raw
// gives (nil: none kept) is copied from it.
func AppendVirtualHost(b []byte, num protowire.Number, vh *routev3.VirtualHost, raw func(*routev3.Route) []byte) ([]byte, error) {
	e := encoder{b: b}
	e.virtualHost(num, vh, raw)
	if e.err != nil {
		return nil, e.err
	}
	return e.b, nil
}

// route writes r's fields; false when r holds a nil message in a oneof
// or a list (proto's own rules for those are left to proto).
func (e *encoder) route(r *routev3.Route) bool {
	if r.Match != nil {
		e.message(1, r.Match, func() bool { return e.routeMatch(r.Match) })
	}
	e.metadata(4, r.Metadata)
	if r.Decorator != nil {
		mark := e.open(5)
		e.str(1, r.Decorator.Operation)
		e.boolValue(2, r.Decorator.Propagate)
		e.closeAt(mark)
	}
	if !e.headerOptions(9, r.RequestHeadersToAdd) || !e.headerOptions(10, r.ResponseHeadersToAdd) {
		return false
	}
	e.strs(11, r.ResponseHeadersToRemove)
	e.strs(12, r.RequestHeadersToRemove)
	e.anyMap(13, r.TypedPerFilterConfig)
	e.str(14, r.Name)
	e.marshal(15, r.Tracing)
	e.uint32Value(16, r.PerRequestBufferLimitBytes)
	e.str(19, r.StatPrefix)
	e.marshal(20, r.RequestBodyBufferLimit)
	for _, s := range r.RouteSpecifiers {
		if !e.elem(21, s) {
			return false
		}
	}
	// oneof action
	switch a := r.Action.(type) {
	case nil:
	case *routev3.Route_Route:
		if a.Route == nil {
			return false
		}
		e.message(2, a.Route, func() bool { return e.routeAction(a.Route) })
	case *routev3.Route_Redirect:
		return e.elem(3, a.Redirect)
	case *routev3.Route_DirectResponse:
		return e.elem(7, a.DirectResponse)
	case *routev3.Route_FilterAction:
		return e.elem(17, a.FilterAction)
	case *routev3.Route_NonForwardingAction:
		return e.elem(18, a.NonForwardingAction)
	default:
		return false
	}
	return true
}

// elem writes a message field that is a oneof's member or a list's
// element, as proto marshals it; false when m is nil (the caller then
// leaves its message to proto).
func (e *encoder) elem(num protowire.Number, m proto.Message) bool {
	if m == nil || !m.ProtoReflect().IsValid() {
		return false
	}
	e.marshal(num, m)
	return true
}

func (e *encoder) routeMatch(m *routev3.RouteMatch) bool {
	if m.Grpc != nil || m.RuntimeFraction != nil || m.TlsContext != nil || len(m.FilterState) > 0 || len(m.Cookies) > 0 {
		return false
	}
	e.boolValue(4, m.CaseSensitive)
	for _, h := range m.Headers {
		e.message(6, h, func() bool { return e.headerMatcher(h) })
	}
	for _, q := range m.QueryParameters {
		e.message(7, q, func() bool { return e.queryMatcher(q) })
	}
	for _, d := range m.DynamicMetadata {
		if !e.elem(13, d) {
			return false
		}
	}
	// oneof path_specifier
	switch p := m.PathSpecifier.(type) {
	case nil:
	case *routev3.RouteMatch_Prefix:
		e.strAlways(1, p.Prefix)
	case *routev3.RouteMatch_Path:
		e.strAlways(2, p.Path)
	case *routev3.RouteMatch_SafeRegex:
		if p.SafeRegex == nil {
			return false
		}
		e.message(10, p.SafeRegex, func() bool { return e.regexMatcher(p.SafeRegex) })
	case *routev3.RouteMatch_PathSeparatedPrefix:
		e.strAlways(14, p.PathSeparatedPrefix)
	default:
		return false
	}
	return true
}

func (e *encoder) headerMatcher(h *routev3.HeaderMatcher) bool {
	e.str(1, h.Name)
	e.boolean(8, h.InvertMatch)
	e.boolean(14, h.TreatMissingHeaderAsEmpty)
	// oneof header_match_specifier
	switch s := h.HeaderMatchSpecifier.(type) {
	case nil:
	case *routev3.HeaderMatcher_StringMatch:
		if s.StringMatch == nil {
			return false
		}
		e.message(13, s.StringMatch, func() bool { return e.stringMatcher(s.StringMatch) })
	case *routev3.HeaderMatcher_PresentMatch:
		e.varintAlways(7, boolVarint(s.PresentMatch))
	case *routev3.HeaderMatcher_PrefixMatch:
		e.strAlways(9, s.PrefixMatch)
	case *routev3.HeaderMatcher_ExactMatch: //nolint:staticcheck // encoded as it may be set
		e.strAlways(4, s.ExactMatch)
	default:
		return false
	}
	return true
}

func boolVarint(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

func (e *encoder) queryMatcher(q *routev3.QueryParameterMatcher) bool {
	e.str(1, q.Name)
	switch s := q.QueryParameterMatchSpecifier.(type) {
	case nil:
	case *routev3.QueryParameterMatcher_StringMatch:
		if s.StringMatch == nil {
			return false
		}
		e.message(5, s.StringMatch, func() bool { return e.stringMatcher(s.StringMatch) })
	case *routev3.QueryParameterMatcher_PresentMatch:
		e.varintAlways(6, boolVarint(s.PresentMatch))
	default:
		return false
	}
	return true
}

func (e *encoder) stringMatcher(s *matcherv3.StringMatcher) bool {
	e.boolean(6, s.IgnoreCase)
	// oneof match_pattern
	switch p := s.MatchPattern.(type) {
	case nil:
	case *matcherv3.StringMatcher_Exact:
		e.strAlways(1, p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		e.strAlways(2, p.Prefix)
	case *matcherv3.StringMatcher_Suffix:
		e.strAlways(3, p.Suffix)
	case *matcherv3.StringMatcher_SafeRegex:
		if p.SafeRegex == nil {
			return false
		}
		e.message(5, p.SafeRegex, func() bool { return e.regexMatcher(p.SafeRegex) })
	case *matcherv3.StringMatcher_Contains:
		e.strAlways(7, p.Contains)
	default:
		return false
	}
	return true
}

func (e *encoder) regexMatcher(r *matcherv3.RegexMatcher) bool {
	if r.EngineType != nil {
		return false
	}
	e.str(2, r.Regex)
	return true
}

// metadata writes a Metadata whose filter_metadata values are Structs of
// scalar values; any other is marshalled by proto.
func (e *encoder) metadata(num protowire.Number, m *corev3.Metadata) {
	if m == nil {
		return
	}
	if m == e.metaMsg {
		e.b = append(e.b, e.metaRaw...)
		return
	}
	start := len(e.b)
	e.message(num, m, func() bool {
		var one [1]string
		for _, k := range sortedKeys(m.FilterMetadata, &one) {
			mark := e.open(1)
			e.strAlways(1, k)
			if s := m.FilterMetadata[k]; s != nil {
				smark := e.open(2)
				if !e.structFields(s) {
					return false
				}
				e.closeAt(smark)
			} else {
				e.tag(2, protowire.BytesType)
				e.b = append(e.b, 0)
			}
			e.closeAt(mark)
		}
		e.anyMap(2, m.TypedFilterMetadata)
		return true
	})
	e.metaMsg, e.metaRaw = m, slices.Clone(e.b[start:])
}

func (e *encoder) structFields(s *structpb.Struct) bool {
	var one [1]string
	for _, k := range sortedKeys(s.Fields, &one) {
		mark := e.open(1)
		e.strAlways(1, k)
		v := s.Fields[k]
		vmark := e.open(2)
		if v != nil {
			switch x := v.Kind.(type) {
			case nil:
			case *structpb.Value_NullValue:
				e.varintAlways(1, uint64(x.NullValue))
			case *structpb.Value_NumberValue:
				e.tag(2, protowire.Fixed64Type)
				e.b = protowire.AppendFixed64(e.b, math.Float64bits(x.NumberValue))
			case *structpb.Value_StringValue:
				e.strAlways(3, x.StringValue)
			case *structpb.Value_BoolValue:
				e.varintAlways(4, boolVarint(x.BoolValue))
			default:
				return false
			}
		}
		e.closeAt(vmark)
		e.closeAt(mark)
	}
	return true
}

func (e *encoder) headerOptions(num protowire.Number, opts []*corev3.HeaderValueOption) bool {
	for _, o := range opts {
		if o == nil {
			return false
		}
		mark := e.open(num)
		if h := o.Header; h != nil {
			hmark := e.open(1)
			e.str(1, h.Key)
			e.str(2, h.Value)
			e.bytes(3, h.RawValue)
			e.closeAt(hmark)
		}
		e.boolValue(2, o.Append) //nolint:staticcheck // encoded as it may be set
		e.varint(3, uint64(o.AppendAction))
		e.boolean(4, o.KeepEmptyValue)
		e.closeAt(mark)
	}
	return true
}

func (e *encoder) routeAction(a *routev3.RouteAction) bool {
	e.marshal(4, a.MetadataMatch)
	e.str(5, a.PrefixRewrite)
	e.duration(8, a.Timeout)
	switch p := a.RetryPolicy; p {
	case nil:
	case defaultRetry:
		e.tag(9, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, defaultRetryWire)
	case defaultRetryHashed:
		e.tag(9, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, defaultRetryHashedWire)
	default:
		e.message(9, p, func() bool { return e.retryPolicy(p) })
	}
	e.varint(11, uint64(a.Priority))
	for _, r := range a.RateLimits {
		if !e.elem(13, r) {
			return false
		}
	}
	e.boolValue(14, a.IncludeVhRateLimits) //nolint:staticcheck // encoded as it may be set
	for _, h := range a.HashPolicy {
		if !e.elem(15, h) {
			return false
		}
	}
	e.marshal(17, a.Cors) //nolint:staticcheck // encoded as it may be set
	e.varint(20, uint64(a.ClusterNotFoundResponseCode))
	e.duration(23, a.MaxGrpcTimeout) //nolint:staticcheck // Istio's field, encoded as it is set
	e.duration(24, a.IdleTimeout)
	for _, u := range a.UpgradeConfigs {
		if !e.elem(25, u) {
			return false
		}
	}
	e.varint(26, uint64(a.InternalRedirectAction)) //nolint:staticcheck // encoded as it may be set
	e.marshal(27, a.HedgePolicy)
	e.duration(28, a.GrpcTimeoutOffset) //nolint:staticcheck // encoded as it may be set
	for _, m := range a.RequestMirrorPolicies {
		if m == nil {
			return false
		}
		e.message(30, m, func() bool { return e.mirror(m) })
	}
	e.uint32Value(31, a.MaxInternalRedirects) //nolint:staticcheck // encoded as it may be set
	e.marshal(32, a.RegexRewrite)
	e.marshal(33, a.RetryPolicyTypedConfig)
	e.marshal(34, a.InternalRedirectPolicy)
	e.marshal(36, a.MaxStreamDuration)
	e.boolean(38, a.AppendXForwardedHost)
	e.marshal(40, a.EarlyDataPolicy)
	e.marshal(41, a.PathRewritePolicy)
	e.duration(42, a.FlushTimeout)
	e.str(45, a.PathRewrite)
	// oneof cluster_specifier
	switch c := a.ClusterSpecifier.(type) {
	case nil:
	case *routev3.RouteAction_Cluster:
		e.strAlways(1, c.Cluster)
	case *routev3.RouteAction_ClusterHeader:
		e.strAlways(2, c.ClusterHeader)
	case *routev3.RouteAction_WeightedClusters:
		if c.WeightedClusters == nil {
			return false
		}
		e.message(3, c.WeightedClusters, func() bool { return e.weighted(c.WeightedClusters) })
	case *routev3.RouteAction_ClusterSpecifierPlugin:
		e.strAlways(37, c.ClusterSpecifierPlugin)
	case *routev3.RouteAction_InlineClusterSpecifierPlugin:
		if !e.elem(39, c.InlineClusterSpecifierPlugin) {
			return false
		}
	default:
		return false
	}
	// oneof host_rewrite_specifier
	switch h := a.HostRewriteSpecifier.(type) {
	case nil:
	case *routev3.RouteAction_HostRewriteLiteral:
		e.strAlways(6, h.HostRewriteLiteral)
	case *routev3.RouteAction_AutoHostRewrite:
		if h.AutoHostRewrite == nil {
			return false
		}
		e.boolValue(7, h.AutoHostRewrite)
	case *routev3.RouteAction_HostRewriteHeader:
		e.strAlways(29, h.HostRewriteHeader)
	case *routev3.RouteAction_HostRewritePathRegex:
		if !e.elem(35, h.HostRewritePathRegex) {
			return false
		}
	case *routev3.RouteAction_HostRewrite:
		e.strAlways(44, h.HostRewrite)
	default:
		return false
	}
	return true
}

func (e *encoder) weighted(w *routev3.WeightedCluster) bool {
	if w.RandomValueSpecifier != nil {
		return false
	}
	for _, c := range w.Clusters {
		if c == nil {
			return false
		}
		e.message(1, c, func() bool { return e.clusterWeight(c) })
	}
	e.str(2, w.RuntimeKeyPrefix)
	e.uint32Value(3, w.TotalWeight) //nolint:staticcheck // encoded as it may be set
	return true
}

func (e *encoder) clusterWeight(c *routev3.WeightedCluster_ClusterWeight) bool {
	e.str(1, c.Name)
	e.uint32Value(2, c.Weight)
	e.marshal(3, c.MetadataMatch)
	if !e.headerOptions(4, c.RequestHeadersToAdd) || !e.headerOptions(5, c.ResponseHeadersToAdd) {
		return false
	}
	e.strs(6, c.ResponseHeadersToRemove)
	e.strs(9, c.RequestHeadersToRemove)
	e.anyMap(10, c.TypedPerFilterConfig)
	e.str(12, c.ClusterHeader)
	// oneof host_rewrite_specifier
	switch h := c.HostRewriteSpecifier.(type) {
	case nil:
	case *routev3.WeightedCluster_ClusterWeight_HostRewriteLiteral:
		e.strAlways(11, h.HostRewriteLiteral)
	default:
		return false
	}
	return true
}

func (e *encoder) retryPolicy(p *routev3.RetryPolicy) bool {
	e.str(1, p.RetryOn)
	e.uint32Value(2, p.NumRetries)
	e.duration(3, p.PerTryTimeout)
	e.marshal(4, p.RetryPriority)
	for _, h := range p.RetryHostPredicate {
		if h == nil {
			return false
		}
		e.message(5, h, func() bool {
			e.str(1, h.Name)
			switch c := h.ConfigType.(type) {
			case nil:
			case *routev3.RetryPolicy_RetryHostPredicate_TypedConfig:
				if c.TypedConfig == nil {
					return false
				}
				e.anyValue(3, c.TypedConfig)
			default:
				return false
			}
			return true
		})
	}
	e.varint(6, uint64(p.HostSelectionRetryMaxAttempts))
	if len(p.RetriableStatusCodes) > 0 {
		n := 0
		for _, c := range p.RetriableStatusCodes {
			n += protowire.SizeVarint(uint64(c))
		}
		e.tag(7, protowire.BytesType)
		e.b = protowire.AppendVarint(e.b, uint64(n))
		for _, c := range p.RetriableStatusCodes {
			e.b = protowire.AppendVarint(e.b, uint64(c))
		}
	}
	e.marshal(8, p.RetryBackOff)
	for _, h := range p.RetriableHeaders {
		if !e.elem(9, h) {
			return false
		}
	}
	for _, h := range p.RetriableRequestHeaders {
		if !e.elem(10, h) {
			return false
		}
	}
	e.marshal(11, p.RateLimitedRetryBackOff)
	for _, o := range p.RetryOptionsPredicates {
		if !e.elem(12, o) {
			return false
		}
	}
	e.duration(13, p.PerTryIdleTimeout)
	e.boolean(14, p.RefreshClusterOnRetry)
	return true
}

func (e *encoder) mirror(m *routev3.RouteAction_RequestMirrorPolicy) bool {
	e.str(1, m.Cluster)
	if f := m.RuntimeFraction; f != nil {
		mark := e.open(3)
		e.fraction(1, f.DefaultValue)
		e.str(2, f.RuntimeKey)
		e.closeAt(mark)
	}
	e.boolValue(4, m.TraceSampled)
	e.str(5, m.ClusterHeader)
	e.boolean(6, m.DisableShadowHostSuffixAppend)
	for _, h := range m.RequestHeadersMutations {
		if !e.elem(7, h) {
			return false
		}
	}
	e.str(8, m.HostRewriteLiteral)
	return true
}

func (e *encoder) fraction(num protowire.Number, f *typev3.FractionalPercent) {
	if f == nil {
		return
	}
	mark := e.open(num)
	e.varint(1, uint64(f.Numerator))
	e.varint(2, uint64(f.Denominator))
	e.closeAt(mark)
}

// virtualHost writes the fields of vh a route configuration's virtual
// hosts have (name, domains, routes, require_tls,
// include_request_attempt_count); any other is marshalled by proto.
func (e *encoder) virtualHost(num protowire.Number, vh *routev3.VirtualHost, raw func(*routev3.Route) []byte) {
	e.message(num, vh, func() bool {
		if !plainVirtualHost(vh) {
			return false
		}
		e.str(1, vh.Name)
		e.strs(2, vh.Domains)
		for _, r := range vh.Routes {
			if r == nil {
				return false
			}
			if raw != nil {
				if b := raw(r); b != nil {
					e.tag(3, protowire.BytesType)
					e.b = protowire.AppendBytes(e.b, b)
					continue
				}
			}
			e.message(3, r, func() bool { return e.route(r) })
		}
		e.varint(4, uint64(vh.RequireTls))
		e.boolean(14, vh.IncludeRequestAttemptCount)
		return true
	})
}

// plainVirtualHost reports whether vh sets no field but those
// virtualHost writes itself.
func plainVirtualHost(vh *routev3.VirtualHost) bool {
	return len(vh.VirtualClusters) == 0 && len(vh.RateLimits) == 0 && len(vh.RequestHeadersToAdd) == 0 &&
		vh.Cors == nil && len(vh.ResponseHeadersToAdd) == 0 && len(vh.ResponseHeadersToRemove) == 0 && //nolint:staticcheck // checked as it may be set
		len(vh.RequestHeadersToRemove) == 0 && len(vh.TypedPerFilterConfig) == 0 && vh.RetryPolicy == nil &&
		vh.HedgePolicy == nil && !vh.IncludeAttemptCountInResponse && vh.PerRequestBufferLimitBytes == nil &&
		vh.RetryPolicyTypedConfig == nil && vh.Matcher == nil && len(vh.RequestMirrorPolicies) == 0 &&
		vh.Metadata == nil && vh.RequestBodyBufferLimit == nil && !vh.IncludeIsTimeoutRetryHeader && len(vh.RouteSpecifiers) == 0
}
