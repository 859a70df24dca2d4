package envoygen

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
	"github.com/bulwark-mesh/bulwark/pkg/xds/reqauthn"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const (
	virtualInbound     = "virtualInbound"
	virtualInboundPort = 15006
)

// inboundTarget is a port of the workload that a service sends to, or
// that an ingress listener of its Sidecar declares (sidecaringress.go).
type inboundTarget struct {
	port     uint32 // the target (container) port
	protocol protocol
	svc      *model.Service // nil for an ingress listener
	svcPort  model.Port
	// Of an ingress listener: the listener, the address its chains are
	// named by, and its own TLS when honoured.
	ingress *networkingv1.IstioIngressListener
	bind    string
	tls     *networkingv1.ServerTLSSettings
}

// scopePart is what of t a proxy's scope reads.
func (t inboundTarget) scopePart() string {
	host := ""
	if t.svc != nil {
		host = t.svc.Hostname
	}
	return fmt.Sprintf("%d/%d/%s/%d", t.port, t.protocol, host, t.svcPort.Port)
}

// inboundTargets are the target ports of the services that select the
// proxy's workload (services of its namespace whose selector its labels
// match), one per port: the first service by hostname decides a port
// claimed twice. A named target port is resolved by the service's
// endpoint at one of the proxy's addresses. When the proxy's Sidecar has
// ingress listeners, they are the targets instead (sidecaringress.go).
func (b *builder) inboundTargets() []inboundTarget {
	if b.targets != nil {
		return *b.targets
	}
	if in := b.ingressListeners(); in != nil {
		out := b.ingressTargets(in)
		b.targets = &out
		return out
	}
	out := []inboundTarget{}
	seen := map[uint32]bool{}
	for _, svc := range b.selectingServices() {
		for _, sp := range svc.Ports {
			proto := protocolOf(sp)
			if proto == protoUDP {
				continue
			}
			port := b.targetPort(svc, sp)
			if port == 0 || port == virtualInboundPort || seen[port] {
				continue
			}
			seen[port] = true
			out = append(out, inboundTarget{port: port, protocol: proto, svc: svc, svcPort: sp})
		}
	}
	slices.SortFunc(out, func(a, b inboundTarget) int { return cmp.Compare(a.port, b.port) })
	b.targets = &out
	return out
}

func (b *builder) targetPort(svc *model.Service, sp model.Port) uint32 {
	for _, ep := range svc.Endpoints[sp.Port] {
		if slices.Contains(b.p.IPs, ep.Address) {
			return ep.Port
		}
	}
	switch {
	case sp.TargetPort != 0:
		return sp.TargetPort
	case sp.TargetPortName != "":
		return 0
	}
	return sp.Port
}

// chainSpec is one filter chain of virtualInbound.
type chainSpec struct {
	name      string
	port      uint32 // 0: any port (passthrough)
	transport string
	alpn      []string
	mtls      bool // terminate Istio mTLS
	http      bool
	cluster   string
	vhostName string // HTTP: the inbound virtual host's name
	// serverTLS terminates an ingress listener's own TLS (sidecaringress.go).
	serverTLS *tlsv3.DownstreamTlsContext
}

// inboundChains are the chains of one port (or of the passthrough when
// port is 0) for its mTLS mode, as Istio's filter chain match options
// make them.
func inboundChains(port uint32, proto protocol, mode model.MTLSMode, cluster, vhost string) []chainSpec {
	name := "0.0.0.0_" + strconv.FormatUint(uint64(port), 10)
	httpName, tcpName := name, name
	if port == 0 {
		httpName, tcpName = "virtualInbound-catchall-http", virtualInbound
	}
	h := func(transport string, alpn []string, mtls bool) chainSpec {
		return chainSpec{name: httpName, port: port, transport: transport, alpn: alpn, mtls: mtls, http: true, cluster: cluster, vhostName: vhost}
	}
	t := func(transport string, alpn []string, mtls bool) chainSpec {
		return chainSpec{name: tcpName, port: port, transport: transport, alpn: alpn, mtls: mtls, cluster: cluster}
	}
	switch {
	case proto.isHTTP():
		switch mode {
		case model.MTLSStrict:
			return []chainSpec{h(transportTLS, nil, true)}
		case model.MTLSPermissive:
			return []chainSpec{h(transportTLS, istioALPNs, true), h(transportRaw, nil, false)}
		}
		return []chainSpec{h(transportRaw, nil, false)}
	case proto == protoAuto:
		// The passthrough: HTTP where the client's sidecar or the HTTP
		// inspector says so, TCP otherwise.
		switch mode {
		case model.MTLSStrict:
			return []chainSpec{h(transportTLS, istioHTTPALPNs, true), t(transportTLS, nil, true)}
		case model.MTLSPermissive:
			return []chainSpec{
				h(transportTLS, istioHTTPALPNs, true), h(transportRaw, plainHTTPALPNs, false),
				t(transportTLS, mtlsClientALPN, true), t(transportRaw, nil, false), t(transportTLS, nil, false),
			}
		}
		return []chainSpec{h(transportRaw, plainHTTPALPNs, false), t(transportRaw, nil, false)}
	}
	switch mode {
	case model.MTLSStrict:
		return []chainSpec{t(transportTLS, nil, true)}
	case model.MTLSPermissive:
		return []chainSpec{t(transportTLS, istioALPNs, true), t(transportTLS, nil, false), t(transportRaw, nil, false)}
	}
	return []chainSpec{t(transportRaw, nil, false)}
}

// inboundListener is virtualInbound for the proxy's workload.
func (b *builder) inboundListener() resource.Resource {
	targets := b.inboundTargets()
	policies := b.snap.AuthorizationPolicies(b.p.Namespace, b.p.Labels)
	var specs []chainSpec
	var k strings.Builder
	for _, t := range targets {
		mode := b.snap.MTLSMode(b.p.Namespace, b.p.Labels, t.port)
		cluster := inboundClusterName(t.port)
		vhost := "inbound|http|" + strconv.FormatUint(uint64(t.svcPort.Port), 10)
		if t.ingress != nil {
			specs = append(specs, b.ingressChains(t, mode, cluster, vhost)...)
		} else {
			specs = append(specs, inboundChains(t.port, t.protocol, mode, cluster, vhost)...)
		}
		fmt.Fprintf(&k, "%d:%d:%d:%d,", t.port, t.protocol, mode, t.svcPort.Port)
	}
	if len(targets) > 0 && targets[0].ingress != nil {
		// Names and TLS of ingress chains: the Sidecar's content, and
		// the proxy's address for chains without bind.
		k.WriteString("ingress:" + b.sidecarKey() + ":" + b.inboundBindName() + ";")
	}
	mode := b.snap.MTLSMode(b.p.Namespace, b.p.Labels, 0)
	specs = append(specs, inboundChains(0, protoAuto, mode, inboundPassthroughCluster, "inbound|http|0")...)
	fmt.Fprintf(&k, "pass:%d;", mode)
	for _, p := range policies {
		k.WriteString(p.Namespace + "/" + p.Name + ",")
	}
	// Key sets are the same for every proxy of a push: the names tell.
	requestAuthn := b.snap.RequestAuthentications(b.p.Namespace, b.p.Labels)
	k.WriteString(";jwt:")
	for _, p := range requestAuthn {
		k.WriteString(p.Namespace + "/" + p.Name + ",")
	}
	return resource.Resource{Name: virtualInbound, Key: telemetryKey(b.tel, "lds", virtualInbound, k.String()), Build: func() (proto.Message, error) {
		return b.buildInbound(specs, policies, requestAuthn)
	}}
}

// inboundHTTPFilters are the filters of every inbound HTTP chain before
// the router, in Istio's order: the CUSTOM refusal, jwt_authn, then the
// other RBAC filters.
func (b *builder) inboundHTTPFilters(policies []*model.AuthorizationPolicy, requestAuthn []*model.RequestAuthentication) ([]*hcm.HttpFilter, error) {
	opts := authz.Options{TrustDomain: b.g.TrustDomain, TrustDomainAliases: b.g.Mesh.TrustDomainAliases, Flavor: authz.Envoy}
	custom, rest, err := authz.HTTPFilterGroups(policies, opts)
	if err != nil {
		return nil, err
	}
	jwt, _, err := reqauthn.Filter(requestAuthn, b.g.Keys, keyfetch.URLRule{LoopbackHTTP: b.g.Mesh.AllowLoopbackHTTPJWKS})
	if err != nil {
		return nil, err
	}
	if jwt != nil {
		custom = append(custom, jwt)
	}
	return append(custom, rest...), nil
}

func (b *builder) buildInbound(specs []chainSpec, policies []*model.AuthorizationPolicy, requestAuthn []*model.RequestAuthentication) (*listener.Listener, error) {
	opts := authz.Options{TrustDomain: b.g.TrustDomain, TrustDomainAliases: b.g.Mesh.TrustDomainAliases, Flavor: authz.Envoy}
	httpRBAC, err := b.inboundHTTPFilters(policies, requestAuthn)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", virtualInbound, err)
	}
	tcpRBAC, err := authz.NetworkFilters(policies, opts)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", virtualInbound, err)
	}
	blackhole, err := b.tel.tcpChain(sidecarInbound, nil, blackholeCluster, blackholeCluster, false)
	if err != nil {
		return nil, err
	}
	l := &listener.Listener{
		Name:                             virtualInbound,
		Address:                          socketAddress("0.0.0.0", virtualInboundPort),
		TrafficDirection:                 core.TrafficDirection_INBOUND,
		ListenerFiltersTimeout:           durationpb.New(0),
		ContinueOnListenerFiltersTimeout: true,
		FilterChains: []*listener.FilterChain{{
			Name:             "virtualInbound-blackhole",
			FilterChainMatch: &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(virtualInboundPort)},
			Filters:          blackhole,
		}},
		AccessLog: b.tel.listenerLogs(sidecarInbound),
	}
	for _, s := range specs {
		fc, err := b.inboundChain(s, httpRBAC, tcpRBAC)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", virtualInbound, err)
		}
		l.FilterChains = append(l.FilterChains, fc)
	}
	lf, err := inboundListenerFilters(specs)
	if err != nil {
		return nil, err
	}
	l.ListenerFilters = lf
	return l, nil
}

func (b *builder) inboundChain(s chainSpec, httpRBAC []*hcm.HttpFilter, tcpRBAC []*listener.Filter) (*listener.FilterChain, error) {
	fc := &listener.FilterChain{
		Name:             s.name,
		FilterChainMatch: &listener.FilterChainMatch{TransportProtocol: s.transport, ApplicationProtocols: s.alpn},
	}
	if s.port != 0 {
		fc.FilterChainMatch.DestinationPort = wrapperspb.UInt32(s.port)
	}
	switch {
	case s.serverTLS != nil:
		ts, err := transportSocket(tlsSocketName, s.serverTLS)
		if err != nil {
			return nil, err
		}
		fc.TransportSocket = ts
	case s.mtls:
		alpn := serverTCPALPNs
		if s.http {
			alpn = serverHTTPALPNs
		}
		ts, err := b.downstreamMTLS(alpn)
		if err != nil {
			return nil, err
		}
		fc.TransportSocket = ts
	}
	if !s.http {
		filters, err := b.tel.tcpChain(sidecarInbound, tcpRBAC, s.cluster, s.cluster, true)
		if err != nil {
			return nil, err
		}
		fc.Filters = filters
		return fc, nil
	}
	filters := append(slices.Clone(httpRBAC), routerFilter())
	statPrefix := "inbound_" + s.name
	if s.port == 0 {
		statPrefix = inboundPassthroughCluster
	}
	m := &hcm.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: s.cluster,
			VirtualHosts: []*route.VirtualHost{{
				Name:    s.vhostName,
				Domains: []string{"*"},
				Routes: []*route.Route{{
					Name:  "default",
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_Route{Route: &route.RouteAction{
						ClusterSpecifier: &route.RouteAction_Cluster{Cluster: s.cluster},
						Timeout:          zeroFetchTimeout,
					}},
				}},
			}},
			ValidateClusters: wrapperspb.Bool(false),
		}},
		HttpFilters:              filters,
		ServerName:               "istio-envoy",
		ForwardClientCertDetails: hcm.HttpConnectionManager_APPEND_FORWARD,
		SetCurrentClientCertDetails: &hcm.HttpConnectionManager_SetCurrentClientCertDetails{
			Subject: wrapperspb.Bool(true), Dns: true, Uri: true,
		},
	}
	commonHCM(m)
	b.tel.hcm(m, sidecarInbound)
	f, err := hcmFilter(m)
	if err != nil {
		return nil, err
	}
	fc.Filters = append(b.tel.inboundNetwork(), f)
	return fc, nil
}

// inboundListenerFilters: original_dst, and the TLS and HTTP inspectors
// on the ports whose chains read what they find; waiting for bytes a
// chain does not need would stall server-first protocols.
func inboundListenerFilters(specs []chainSpec) ([]*listener.ListenerFilter, error) {
	tlsNeeded, httpNeeded := map[uint32]bool{}, map[uint32]bool{}
	ports := map[uint32]bool{}
	for _, s := range specs {
		ports[s.port] = true
		if s.transport == transportTLS {
			tlsNeeded[s.port] = true
		}
		if s.transport == transportRaw && len(s.alpn) > 0 {
			httpNeeded[s.port] = true
		}
	}
	od, err := listenerFilter(originalDstFilterName, originalDstConfig())
	if err != nil {
		return nil, err
	}
	out := []*listener.ListenerFilter{od}
	for _, f := range []struct {
		name   string
		needed map[uint32]bool
		cfg    proto.Message
	}{{tlsInspectorName, tlsNeeded, tlsInspectorConfig()}, {httpInspectorName, httpNeeded, httpInspectorConfig()}} {
		if len(f.needed) == 0 {
			continue
		}
		lf, err := listenerFilter(f.name, f.cfg)
		if err != nil {
			return nil, err
		}
		// Disabled on the listener's own port and on declared ports
		// whose chains do not need it; the passthrough (port 0) decides
		// for every other port.
		disabled := []uint32{virtualInboundPort}
		for p := range ports {
			if p != 0 && !f.needed[p] {
				disabled = append(disabled, p)
			}
		}
		if !f.needed[0] {
			// Needed on declared ports only: disable it everywhere else
			// by enabling it on exactly those.
			var enabled []uint32
			for p := range f.needed {
				enabled = append(enabled, p)
			}
			lf.FilterDisabled = notPorts(enabled)
		} else {
			lf.FilterDisabled = portsPredicate(disabled)
		}
		out = append(out, lf)
	}
	return out, nil
}
