package envoygen

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	proxyprotocol "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const (
	proxyProtocolFilterName = "envoy.filters.listener.proxy_protocol"
	hcmType                 = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// gatewayChainConnectTimeout bounds a TLS handshake on a router's chains,
// against slow-handshake exhaustion (Istio's
// PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT default).
var gatewayChainConnectTimeout = durationpb.New(15 * time.Second)

// gatewayListeners are the router's listeners: "0.0.0.0_<port>" for each
// port some server of its Gateways resolves to and that has a filter
// chain (a port whose servers all wait for routes has none, and no
// listener, as Envoy refuses a listener without chains).
func (b *builder) gatewayListeners() []resource.Resource {
	m := b.merged()
	policies := b.snap.AuthorizationPolicies(b.p.Namespace, b.p.Labels)
	requestAuthn := b.snap.RequestAuthentications(b.p.Namespace, b.p.Labels)
	var k strings.Builder
	for _, p := range policies {
		k.WriteString(p.Namespace + "/" + p.Name + ",")
	}
	k.WriteString(";jwt:")
	for _, p := range requestAuthn {
		k.WriteString(p.Namespace + "/" + p.Name + ",")
	}
	var out []resource.Resource
	for _, l := range m.listeners {
		if !slices.ContainsFunc(l.servers, (*gwServer).hasChain) {
			continue
		}
		name := listenerName("0.0.0.0", l.port)
		out = append(out, resource.Resource{
			Name: name,
			// The servers are those of the router's scope: its Gateways,
			// its namespace and labels, the Services selecting it.
			Key: telemetryKey(b.tel, "lds", "router", name, b.routerScope(), k.String()),
			Build: func() (proto.Message, error) {
				return b.gatewayListener(name, l, policies, requestAuthn)
			},
		})
	}
	return out
}

// hasChain reports whether the server has a filter chain: plaintext
// HTTP and terminated HTTPS always do; TLS passthrough and TCP servers
// when VirtualService routes lead somewhere from them.
func (s *gwServer) hasChain() bool {
	return s.kind == kindHTTP || s.terminatesHTTPS() || len(s.l4) > 0
}

func (b *builder) gatewayListener(name string, l *gwListener, policies []*model.AuthorizationPolicy, requestAuthn []*model.RequestAuthentication) (*listener.Listener, error) {
	httpFilters, err := b.inboundHTTPFilters(policies, requestAuthn)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	shape, err := b.gatewayHCMShape(httpFilters)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	// TCP chains refuse what the policies refuse before tcp_proxy, as a
	// sidecar's TCP chains do.
	tcpRBAC, err := authz.NetworkFilters(policies, authz.Options{TrustDomain: b.g.TrustDomain, TrustDomainAliases: b.g.Mesh.TrustDomainAliases, Flavor: authz.Envoy})
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	out := &listener.Listener{
		Name:             name,
		Address:          socketAddress("0.0.0.0", l.port),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		AccessLog:        b.tel.listenerLogs(gatewayClass),
	}
	if b.g.Mesh.GatewayTopology.ProxyProtocol {
		lf, err := listenerFilter(proxyProtocolFilterName, &proxyprotocol.ProxyProtocol{})
		if err != nil {
			return nil, err
		}
		out.ListenerFilters = append(out.ListenerFilters, lf)
	}
	switch l.kind {
	case kindHTTP:
		// Every plaintext HTTP server of the port shares one chain and
		// the route of the port.
		f, err := gatewayHCM(shape, "outbound_"+name, l.servers[0].route)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		out.FilterChains = []*listener.FilterChain{{Filters: []*listener.Filter{f}, TransportSocketConnectTimeout: gatewayChainConnectTimeout}}
	case kindTLS:
		for _, s := range l.servers {
			if !s.terminatesHTTPS() {
				for _, r := range s.l4 {
					fc, err := b.tel.l4Chain(s, r, tcpRBAC)
					if err != nil {
						return nil, fmt.Errorf("listener %s: %w", name, err)
					}
					out.FilterChains = append(out.FilterChains, fc)
				}
				continue
			}
			fc, err := b.gatewayHTTPSChain(name, s, shape)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", name, err)
			}
			out.FilterChains = append(out.FilterChains, fc)
		}
		// Every TLS chain tells clients its ALPN: the TLS inspector reads
		// SNI and ALPN before a chain is chosen.
		lf, err := listenerFilter(tlsInspectorName, tlsInspectorConfig())
		if err != nil {
			return nil, err
		}
		out.ListenerFilters = append(out.ListenerFilters, lf)
	case kindTCP:
		// One opaque TCP server: its route, any connection.
		for _, r := range l.servers[0].l4 {
			fc, err := b.tel.l4Chain(l.servers[0], r, tcpRBAC)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", name, err)
			}
			out.FilterChains = append(out.FilterChains, fc)
		}
	}
	if len(out.FilterChains) == 0 {
		return nil, fmt.Errorf("listener %s: no filter chain", name)
	}
	return out, nil
}

// gatewayHTTPSChain terminates TLS for server s: chosen by its SNI names,
// with its own route.
func (b *builder) gatewayHTTPSChain(name string, s *gwServer, shape []byte) (*listener.FilterChain, error) {
	ts, err := transportSocket(tlsSocketName, s.tls)
	if err != nil {
		return nil, err
	}
	statPrefix := s.server.GetName()
	if statPrefix == "" {
		statPrefix = "outbound_" + name
	}
	f, err := gatewayHCM(shape, statPrefix, s.route)
	if err != nil {
		return nil, err
	}
	fc := &listener.FilterChain{
		TransportSocket:               ts,
		Filters:                       []*listener.Filter{f},
		TransportSocketConnectTimeout: gatewayChainConnectTimeout,
	}
	if len(s.sni) > 0 {
		fc.FilterChainMatch = &listener.FilterChainMatch{ServerNames: slices.Clone(s.sni)}
	}
	return fc, nil
}

// gatewayHCMShape is a router's HTTP connection manager, as Istio's for
// gateways, without its stat prefix and route, marshalled once per
// listener: the client's address from the connection (or the
// X-Forwarded-For entry numTrustedProxies from the end), client
// certificate details replaced by those of the connection
// (SANITIZE_SET), the workload's authorization and request
// authentication filters, then the router.
func (b *builder) gatewayHCMShape(httpFilters []*hcm.HttpFilter) ([]byte, error) {
	topo := b.g.Mesh.GatewayTopology
	fcc := hcm.HttpConnectionManager_SANITIZE_SET
	if topo.ForwardClientCertDetails != nil {
		fcc = *topo.ForwardClientCertDetails
	}
	m := &hcm.HttpConnectionManager{
		HttpFilters:              append(slices.Clone(httpFilters), alpnFilter(), routerFilter()),
		ServerName:               "istio-envoy",
		XffNumTrustedHops:        topo.NumTrustedProxies,
		ForwardClientCertDetails: fcc,
		HttpProtocolOptions:      &core.Http1ProtocolOptions{},
	}
	if fcc == hcm.HttpConnectionManager_APPEND_FORWARD || fcc == hcm.HttpConnectionManager_SANITIZE_SET {
		m.SetCurrentClientCertDetails = &hcm.HttpConnectionManager_SetCurrentClientCertDetails{
			Subject: wrapperspb.Bool(true), Cert: true, Dns: true, Uri: true,
		}
	}
	commonHCM(m)
	b.tel.hcm(m, gatewayClass)
	m.UseRemoteAddress = wrapperspb.Bool(true)
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("gateway connection manager: %w", err)
	}
	return raw, nil
}

// gatewayHCM is the connection manager shape with its stat prefix and
// route: fields appended to a marshalled message set them, as protobuf
// merges concatenated messages.
func gatewayHCM(shape []byte, statPrefix, routeName string) (*listener.Filter, error) {
	own, err := proto.MarshalOptions{Deterministic: true}.Marshal(&hcm.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: adsSource(), RouteConfigName: routeName,
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("gateway connection manager %s: %w", statPrefix, err)
	}
	value := append(append(make([]byte, 0, len(shape)+len(own)), shape...), own...)
	return &listener.Filter{Name: hcmFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: hcmType, Value: value}}}, nil
}

// routerScope is what a router's listeners and routes read of it besides
// the Gateways: its namespace and labels (which Gateways and policies
// select it), whether it may bind privileged ports, and the ports of the
// Services selecting it (which ports servers resolve to).
func (b *builder) routerScope() string {
	out := appendPart(nil, b.p.Namespace)
	for _, k := range slices.Sorted(maps.Keys(b.p.Labels)) {
		out = appendPart(appendPart(out, k), b.p.Labels[k])
	}
	out = strconv.AppendBool(append(out, '|'), b.p.Unprivileged)
	for _, svc := range b.snap.Services() {
		if !b.selectsProxy(svc) {
			continue
		}
		for _, sp := range svc.Ports {
			out = appendPart(out, fmt.Sprintf("%d>%d", sp.Port, b.targetPort(svc, sp)))
		}
	}
	return string(out)
}
