package envoygen

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const (
	virtualOutbound     = "virtualOutbound"
	virtualOutboundPort = 15001
)

func (b *builder) listeners() []resource.Resource {
	out := []resource.Resource{b.virtualOutbound()}
	for _, e := range b.outboundEntries() {
		out = append(out, e.listener())
	}
	for _, port := range b.httpPorts() {
		out = append(out, httpListener(port))
	}
	out = append(out, b.inboundListener())
	// One listener per name: outboundEntries merged those of one address,
	// and no "0.0.0.0_<port>" is an address's.
	slices.SortStableFunc(out, func(x, y resource.Resource) int { return cmp.Compare(x.Name, y.Name) })
	return slices.CompactFunc(out, func(x, y resource.Resource) bool { return x.Name == y.Name })
}

// httpPorts are the ports some service declares HTTP on: each has the
// listener "0.0.0.0_<port>" and the route "<port>".
func (b *builder) httpPorts() []uint32 {
	ports := map[uint32]bool{}
	for _, svc := range b.snap.Services() {
		for _, sp := range svc.Ports {
			if protocolOf(sp).isHTTP() {
				ports[sp.Port] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(ports))
}

// listenerName is Istio's "<ip>_<port>".
func listenerName(ip string, port uint32) string {
	return ip + "_" + strconv.FormatUint(uint64(port), 10)
}

// virtualOutbound hands each intercepted connection to the listener of its
// original destination; what no listener takes goes out unchanged, or
// nowhere under REGISTRY_ONLY.
func (b *builder) virtualOutbound() resource.Resource {
	fallback := passthroughCluster
	if b.g.Mesh.RegistryOnly {
		fallback = blackholeCluster
	}
	return resource.Resource{Name: virtualOutbound, Key: key("lds", virtualOutbound, fallback), Build: func() (proto.Message, error) {
		loop, err := tcpProxyFilter(blackholeCluster, blackholeCluster)
		if err != nil {
			return nil, err
		}
		catchAll, err := tcpProxyFilter(fallback, fallback)
		if err != nil {
			return nil, err
		}
		return &listener.Listener{
			Name:             virtualOutbound,
			Address:          socketAddress("0.0.0.0", virtualOutboundPort),
			UseOriginalDst:   wrapperspb.Bool(true),
			TrafficDirection: core.TrafficDirection_OUTBOUND,
			FilterChains: []*listener.FilterChain{
				{
					Name:             "virtualOutbound-blackhole",
					FilterChainMatch: &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(virtualOutboundPort)},
					Filters:          []*listener.Filter{loop},
				},
				{Name: "virtualOutbound-catchall-tcp", Filters: []*listener.Filter{catchAll}},
			},
		}, nil
	}}
}

// httpListener routes HTTP to port by RDS route "<port>"; what is not
// plaintext HTTP passes through.
func httpListener(port uint32) resource.Resource {
	name := listenerName("0.0.0.0", port)
	routeName := strconv.FormatUint(uint64(port), 10)
	return resource.Resource{Name: name, Key: key("lds", name), Build: func() (proto.Message, error) {
		f, err := outboundHCM(name, routeName)
		if err != nil {
			return nil, err
		}
		pass, err := tcpProxyFilter(passthroughCluster, passthroughCluster)
		if err != nil {
			return nil, err
		}
		inspector, err := listenerFilter(httpInspectorName, httpInspectorConfig())
		if err != nil {
			return nil, err
		}
		return &listener.Listener{
			Name:       name,
			Address:    socketAddress("0.0.0.0", port),
			BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{{
				FilterChainMatch: &listener.FilterChainMatch{TransportProtocol: transportRaw, ApplicationProtocols: plainHTTPALPNs},
				Filters:          []*listener.Filter{f},
			}},
			DefaultFilterChain:               &listener.FilterChain{Name: "PassthroughFilterChain", Filters: []*listener.Filter{pass}},
			ListenerFilters:                  []*listener.ListenerFilter{inspector},
			ListenerFiltersTimeout:           durationpb.New(0),
			ContinueOnListenerFiltersTimeout: true,
			TrafficDirection:                 core.TrafficDirection_OUTBOUND,
		}, nil
	}}
}

// outboundHCM is the HTTP connection manager of the outbound listener
// name, routing by the RDS route routeName.
func outboundHCM(name, routeName string) (*listener.Filter, error) {
	m := &hcm.HttpConnectionManager{
		StatPrefix: "outbound_" + name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: adsSource(), RouteConfigName: routeName,
		}},
		HttpFilters: []*hcm.HttpFilter{routerFilter()},
	}
	commonHCM(m)
	return hcmFilter(m)
}
