package envoygen

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

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
		out = append(out, e.listener(b.tel))
	}
	for _, port := range b.httpPorts() {
		out = append(out, httpListener(port, b.httpDefault(port), b.tel))
	}
	out = append(out, b.inboundListener())
	// One listener per name: outboundEntries merged those of one address,
	// and no "0.0.0.0_<port>" is an address's.
	slices.SortStableFunc(out, func(x, y resource.Resource) int { return cmp.Compare(x.Name, y.Name) })
	return slices.CompactFunc(out, func(x, y resource.Resource) bool { return x.Name == y.Name })
}

// namedOutboundListeners is listeners() of the outbound listeners named,
// those of services' addresses and ports: every service's entries are
// listed, as they share addresses, but only those named are built.
func (b *builder) namedOutboundListeners(names []string) []resource.Resource {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	var out []resource.Resource
	for _, e := range b.outboundEntries() {
		if want[e.name()] {
			out = append(out, e.listener(b.tel))
		}
	}
	for _, port := range b.httpPorts() {
		if name := listenerName("0.0.0.0", port); want[name] && !slices.ContainsFunc(out, func(r resource.Resource) bool { return r.Name == name }) {
			out = append(out, httpListener(port, b.httpDefault(port), b.tel))
		}
	}
	return out
}

// httpPorts are the ports some service declares HTTP on (or a
// ServiceEntry without addresses leaves undeclared, entry.go): each has
// the listener "0.0.0.0_<port>" and the route "<port>".
func (b *builder) httpPorts() []uint32 {
	ports := map[uint32]bool{}
	for _, svc := range b.listenerServices() {
		for _, sp := range svc.Ports {
			if protocolOf(sp).isHTTP() || sniffedOnAnyAddress(svc, sp) {
				ports[sp.Port] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(ports))
}

// listenerName is Istio's "<ip>_<port>".
func listenerName(ip string, port uint32) string {
	var digits [20]byte // a concatenation allocates once
	return ip + "_" + string(strconv.AppendUint(digits[:0], uint64(port), 10))
}

// virtualOutbound hands each intercepted connection to the listener of its
// original destination; what no listener takes goes out unchanged, or
// nowhere under REGISTRY_ONLY.
func (b *builder) virtualOutbound() resource.Resource {
	fallback := b.fallbackCluster()
	return resource.Resource{Name: virtualOutbound, Key: telemetryKey(b.tel, "lds", virtualOutbound, fallback), Build: func() (proto.Message, error) {
		loop, err := b.tel.tcpChain(sidecarOutbound, nil, blackholeCluster, blackholeCluster, false)
		if err != nil {
			return nil, err
		}
		catchAll, err := b.tel.tcpChain(sidecarOutbound, nil, fallback, fallback, true)
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
					Filters:          loop,
				},
				{Name: "virtualOutbound-catchall-tcp", Filters: catchAll},
			},
			AccessLog: b.tel.listenerLogs(sidecarOutbound),
		}, nil
	}}
}

// httpListener routes HTTP to port by RDS route "<port>"; what is not
// plaintext HTTP goes to fallback: out unchanged, or nowhere under
// REGISTRY_ONLY (Istio's buildOutboundCatchAllNetworkFiltersOnly), or to
// a ServiceEntry's TCP port without addresses (httpDefault).
func httpListener(port uint32, fallback string, t *Telemetry) resource.Resource {
	name := listenerName("0.0.0.0", port)
	routeName := strconv.FormatUint(uint64(port), 10)
	return resource.Resource{Name: name, Key: telemetryKey(t, "lds", name, fallback), Build: func() (proto.Message, error) {
		f, err := outboundHCM(name, routeName, t)
		if err != nil {
			return nil, err
		}
		pass, err := t.tcpChain(sidecarOutbound, nil, fallback, fallback, true)
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
			DefaultFilterChain:               &listener.FilterChain{Name: "PassthroughFilterChain", Filters: pass},
			ListenerFilters:                  []*listener.ListenerFilter{inspector},
			ListenerFiltersTimeout:           durationpb.New(0),
			ContinueOnListenerFiltersTimeout: true,
			TrafficDirection:                 core.TrafficDirection_OUTBOUND,
		}, nil
	}}
}

// outboundHCM is the HTTP connection manager of the outbound listener
// name, routing by the RDS route routeName.
func outboundHCM(name, routeName string, t *Telemetry) (*listener.Filter, error) {
	m := &hcm.HttpConnectionManager{
		StatPrefix: "outbound_" + name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: adsSource(), RouteConfigName: routeName,
		}},
		HttpFilters: []*hcm.HttpFilter{alpnFilter(), routerFilter()},
	}
	commonHCM(m)
	t.hcm(m, sidecarOutbound)
	return hcmFilter(m)
}

// outboundListenerShape is what every outbound listener of a service port
// has: not bound, outbound, no wait for listener filters.
func outboundListenerShape() *listener.Listener {
	return &listener.Listener{
		BindToPort:                       wrapperspb.Bool(false),
		TrafficDirection:                 core.TrafficDirection_OUTBOUND,
		ContinueOnListenerFiltersTimeout: true,
		ListenerFiltersTimeout:           durationpb.New(0),
	}
}

// tcpListenerShape is outboundListenerShape validated and marshalled once.
var tcpListenerShape = sync.OnceValues(func() (resource.Preencoded, error) {
	l := outboundListenerShape()
	l.Name = "shape"
	l.Address = socketAddress("0.0.0.0", 1)
	if err := l.ValidateAll(); err != nil {
		return nil, fmt.Errorf("listener shape: %w", err)
	}
	l.Name, l.Address = "", nil
	return resource.Preencode(l)
})

// tcpListenerWire encodes the outbound listener name of a TCP service
// port at addr:port, which proxies to cluster (see wire.go), with t's
// istio.stats before tcp_proxy and its access log on it.
func tcpListenerWire(name, addr string, port uint32, cluster string, t *Telemetry) ([]byte, error) {
	shape, err := tcpListenerShape()
	if err != nil {
		return nil, err
	}
	var a, sa, fc, f, tc, v int
	var statsFilters, accessLogs [][]byte
	if t != nil {
		statsFilters, accessLogs = t.outboundStatsWire, t.accessLogWire
	}
	size := len(shape) + len(name) + len(addr) + 2*len(cluster) + len(tcpProxyType) + 72
	for _, b := range statsFilters {
		size += len(b) + 4
	}
	for _, b := range accessLogs {
		size += len(b) + 4
	}
	w := append(make(wire, 0, size), shape...)
	w = w.str(listenerNameField, name)
	w, a = w.open(listenerAddress)
	w, sa = w.open(addressSocketAddress)
	w = w.str(socketAddressAddress, addr).varint(socketAddressPort, uint64(port)).close(sa).close(a)
	w, fc = w.open(listenerFilterChains)
	for _, f := range statsFilters {
		w = w.message(filterChainFilters, f)
	}
	w, f = w.open(filterChainFilters)
	w = w.str(filterName, tcpProxyFilterName)
	w, tc = w.open(filterTypedConfig)
	w = w.str(anyTypeURL, tcpProxyType)
	w, v = w.open(anyValue)
	w = w.str(tcpProxyStatPrefix, cluster).str(tcpProxyCluster, cluster)
	for _, al := range accessLogs {
		w = w.message(tcpProxyAccessLog, al)
	}
	return w.close(v).close(tc).close(f).close(fc), nil
}

// Field numbers of envoy.config.listener.v3.Listener and of what it nests.
const (
	listenerNameField    = 1 // Listener.name
	listenerAddress      = 2 // Listener.address
	listenerFilterChains = 3 // Listener.filter_chains
	filterChainFilters   = 3 // FilterChain.filters
	filterName           = 1 // Filter.name
	filterTypedConfig    = 4 // Filter.typed_config
	tcpProxyStatPrefix   = 1 // TcpProxy.stat_prefix
	tcpProxyCluster      = 2 // TcpProxy.cluster
	tcpProxyAccessLog    = 5 // TcpProxy.access_log
)

const tcpProxyType = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
