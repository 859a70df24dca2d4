package envoygen

import (
	"cmp"
	"fmt"
	"slices"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	httpinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	originaldst "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	alpn "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Filter names, Envoy's well-known ones.
const (
	hcmFilterName         = "envoy.filters.network.http_connection_manager"
	tcpProxyFilterName    = "envoy.filters.network.tcp_proxy"
	routerFilterName      = "envoy.filters.http.router"
	alpnFilterName        = "istio.alpn"
	originalDstFilterName = "envoy.filters.listener.original_dst"
	tlsInspectorName      = "envoy.filters.listener.tls_inspector"
	httpInspectorName     = "envoy.filters.listener.http_inspector"
)

func socketAddress(addr string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}
}

func hcmFilter(m *hcm.HttpConnectionManager) (*listener.Filter, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("http connection manager %s: %w", m.StatPrefix, err)
	}
	return &listener.Filter{Name: hcmFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}, nil
}

// commonHCM sets what Istio sets on every sidecar connection manager:
// paths normalized before routing and RBAC, escaped slashes kept,
// WebSocket upgrades, no idle timeout on streams.
func commonHCM(m *hcm.HttpConnectionManager) {
	m.NormalizePath = wrapperspb.Bool(true)
	m.PathWithEscapedSlashesAction = hcm.HttpConnectionManager_KEEP_UNCHANGED
	m.UseRemoteAddress = wrapperspb.Bool(false)
	m.StreamIdleTimeout = durationpb.New(0)
	m.UpgradeConfigs = []*hcm.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}
}

// alpnFilter is istio-proxy's istio.alpn, on outbound connection managers
// as Istio sets it: the ALPN offered over Istio mTLS names the HTTP version
// ("istio-http/1.1"), by which a server's sidecar chooses its HTTP chain
// on a port whose protocol it sniffs.
func alpnFilter() *hcm.HttpFilter {
	a, _ := anypb.New(&alpn.FilterConfig{AlpnOverride: []*alpn.FilterConfig_AlpnOverride{
		{UpstreamProtocol: alpn.FilterConfig_HTTP10, AlpnOverride: []string{"istio-http/1.0", "istio", "http/1.0"}},
		{UpstreamProtocol: alpn.FilterConfig_HTTP11, AlpnOverride: []string{"istio-http/1.1", "istio", "http/1.1"}},
		{UpstreamProtocol: alpn.FilterConfig_HTTP2, AlpnOverride: []string{"istio-h2", "istio", "h2"}},
	}}) // constant strings always marshal
	return &hcm.HttpFilter{Name: alpnFilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}}
}

func routerFilter() *hcm.HttpFilter {
	a, _ := anypb.New(&router.Router{}) // an empty message always marshals
	return &hcm.HttpFilter{Name: routerFilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}}
}

func listenerFilter(name string, cfg proto.Message) (*listener.ListenerFilter, error) {
	a, err := anypb.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("listener filter %s: %w", name, err)
	}
	return &listener.ListenerFilter{Name: name, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: a}}, nil
}

func originalDstConfig() proto.Message { return &originaldst.OriginalDst{} }

func tlsInspectorConfig() proto.Message {
	return &tlsinspector.TlsInspector{InitialReadBufferSize: wrapperspb.UInt32(512)}
}

func httpInspectorConfig() proto.Message { return &httpinspector.HttpInspector{} }

// portsPredicate matches connections to any of ports.
func portsPredicate(ports []uint32) *listener.ListenerFilterChainMatchPredicate {
	slices.SortFunc(ports, cmp.Compare)
	ports = slices.Compact(ports)
	rules := make([]*listener.ListenerFilterChainMatchPredicate, 0, len(ports))
	for _, p := range ports {
		rules = append(rules, &listener.ListenerFilterChainMatchPredicate{
			Rule: &listener.ListenerFilterChainMatchPredicate_DestinationPortRange{
				DestinationPortRange: &typev3.Int32Range{Start: int32(p), End: int32(p) + 1},
			},
		})
	}
	if len(rules) == 1 {
		return rules[0]
	}
	return &listener.ListenerFilterChainMatchPredicate{Rule: &listener.ListenerFilterChainMatchPredicate_OrMatch{
		OrMatch: &listener.ListenerFilterChainMatchPredicate_MatchSet{Rules: rules},
	}}
}

// notPorts matches connections to any port but ports.
func notPorts(ports []uint32) *listener.ListenerFilterChainMatchPredicate {
	return &listener.ListenerFilterChainMatchPredicate{Rule: &listener.ListenerFilterChainMatchPredicate_NotMatch{
		NotMatch: portsPredicate(ports),
	}}
}
