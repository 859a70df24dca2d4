package envoygen

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// A Sidecar's ingress listeners, as Istio's generator builds them
// (buildInboundChainConfigs and buildInboundClustersFromSidecar, with
// PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE off, its default):
// when the proxy's Sidecar lists any, they, not the ports of the services
// selecting the workload, are its inbound ports. Each listener is
//
//   - a set of filter chains of virtualInbound for its port, by the
//     workload's PeerAuthentication mode of that port and the port's
//     protocol (protocol.Parse: an unknown or empty one is sniffed, HTTP and
//     TCP chains), named "<bind>_<port>" (without bind, the proxy's first
//     global unicast address, else its family's wildcard), with the
//     authorization, RequestAuthentication and telemetry filters of every
//     inbound chain; with `tls` (and Mesh.SidecarIngressTLS, Istio's
//     ENABLE_TLS_ON_SIDECAR_INGRESS), HTTPS read as HTTP and TLS as TCP, and
//     where the mode is DISABLE one chain terminating the listener's own TLS;
//   - a cluster "inbound|<port>||" to its defaultEndpoint: none, the
//     connection's original destination; "127.0.0.1:<p>" or "[::1]:<p>"
//     the loopback address of the proxy's IP family; "0.0.0.0:<p>" or
//     "[::]:<p>" the proxy's own address of that family (loopback when it
//     has none); "unix://<path>" that socket. A cluster to any but the
//     loopback address binds its connections to 127.0.0.6, which
//     istio-iptables lets through. The listener's connectionPool, else the
//     Sidecar's inboundConnectionPool, sets its limits.
//
// A listener whose captureMode is NONE would be a listener bound to its
// port (with the proxy's interception, which Bulwark serves, always
// REDIRECT): Bulwark does not build it, and reports it (pkg/policy); its
// cluster is built, as Istio builds it, and traffic redirected to its port
// takes the passthrough chains, as it does in Istio's virtualInbound.

// ingressListeners are the ingress listeners of the proxy's Sidecar, the
// first of each port (validation refuses a port listed twice); nil when
// it has none (or the proxy is a router, configured by no Sidecar).
func (b *builder) ingressListeners() []*networkingv1.IstioIngressListener {
	if b.p.Router {
		return nil
	}
	in := b.egress().sidecar.GetSpec().GetIngress()
	if len(in) == 0 {
		return nil
	}
	out := make([]*networkingv1.IstioIngressListener, 0, len(in))
	seen := map[uint32]bool{}
	for _, l := range in {
		n := l.GetPort().GetNumber()
		if n == 0 || n > 65535 || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, l)
	}
	return out
}

// ingressTargets are the inbound targets of the proxy's Sidecar's ingress
// listeners that virtualInbound serves (captureMode not NONE, and not
// virtualInbound's own port), by port.
func (b *builder) ingressTargets(listeners []*networkingv1.IstioIngressListener) []inboundTarget {
	out := []inboundTarget{}
	for _, l := range listeners {
		n := l.GetPort().GetNumber()
		if n == virtualInboundPort || l.GetCaptureMode() == networkingv1.CaptureMode_NONE {
			continue
		}
		t := inboundTarget{
			port:     n,
			protocol: ingressProtocol(l.GetPort().GetProtocol()),
			svcPort:  model.Port{Name: l.GetPort().GetName(), Port: n, Protocol: l.GetPort().GetProtocol()},
			ingress:  l,
			bind:     l.GetBind(),
		}
		if t.bind == "" {
			t.bind = b.inboundBindName()
		}
		if l.GetTls() != nil && b.g.Mesh.SidecarIngressTLS {
			t.protocol = afterTLSTermination(l.GetPort().GetProtocol(), t.protocol)
			t.tls = l.GetTls()
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, c inboundTarget) int { return int(a.port) - int(c.port) })
	return out
}

// inboundBindName names the chains of an ingress listener without bind,
// as Istio's getSidecarInboundBindIPs: the proxy's first global unicast
// address, else the wildcard of its IP family.
func (b *builder) inboundBindName() string {
	for _, ip := range b.p.IPs {
		if a, err := netip.ParseAddr(ip); err == nil && a.IsGlobalUnicast() {
			return a.String()
		}
	}
	if v4, _ := b.ipFamilies(); !v4 {
		return "::"
	}
	return "0.0.0.0"
}

// ingressProtocol is how Istio's protocol.Parse and its listener protocol
// read an ingress port's protocol: an empty or unknown one is sniffed;
// UDP gets TCP chains, as Istio gives it.
func ingressProtocol(p string) protocol {
	switch strings.ToLower(p) {
	case "http", "http_proxy":
		return protoHTTP
	case "http2", "grpc", "grpc-web":
		return protoHTTP2
	case "tcp", "udp", "https", "tls", "mongo", "redis", "mysql":
		return protoTCP
	}
	return protoAuto
}

// afterTLSTermination is the protocol of an ingress port once its own TLS
// is terminated: HTTPS is HTTP, TLS is TCP, the others stay.
func afterTLSTermination(p string, was protocol) protocol {
	if strings.EqualFold(p, "https") {
		return protoHTTP
	}
	return was
}

// ingressChains are the filter chains of an ingress target for the mTLS
// mode of its port: its own TLS terminated where the mode is DISABLE, as
// Istio's getTLSFilterChainMatchOptions; otherwise the mode's chains, as
// for a service's port. A listener whose TLS cannot be served gets one
// chain to BlackHoleCluster instead: its port is refused, not served in
// plaintext.
func (b *builder) ingressChains(t inboundTarget, mode model.MTLSMode, cluster, vhost string) []chainSpec {
	name := t.bind + "_" + strconv.FormatUint(uint64(t.port), 10)
	if t.tls == nil || mode != model.MTLSDisable {
		specs := inboundChains(t.port, t.protocol, mode, cluster, vhost)
		for i := range specs {
			specs[i].name = name
		}
		return specs
	}
	if checkServerTLS(t.tls, b.g.Mesh) != nil {
		return []chainSpec{{name: name, port: t.port, cluster: blackholeCluster}}
	}
	ctx := gatewayTLSContext(t.tls, false, b.g.Mesh.TLSDefaults)
	return []chainSpec{{
		name: name, port: t.port, transport: transportTLS, serverTLS: ctx,
		http: t.protocol.isHTTP(), cluster: cluster, vhostName: vhost,
	}}
}

// ingressEndpoint is where the cluster of an ingress listener sends to:
// the address of its defaultEndpoint as the proxy resolves it, "" for the
// connection's original destination, and the port.
func (b *builder) ingressEndpoint(l *networkingv1.IstioIngressListener) (addr string, port uint32) {
	ep := l.GetDefaultEndpoint()
	if strings.HasPrefix(ep, unixPrefix) {
		return ep, 0
	}
	host, p, err := net.SplitHostPort(ep)
	if err != nil {
		return "", 0
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0
	}
	v4, v6 := b.ipFamilies()
	first := func(wantV4 bool) string {
		for _, ip := range b.p.IPs {
			if a := net.ParseIP(ip); a != nil && (a.To4() != nil) == wantV4 {
				return ip
			}
		}
		return ""
	}
	switch host {
	case "0.0.0.0":
		addr = cmp.Or(first(true), "127.0.0.1")
	case "::":
		addr = cmp.Or(first(false), "::1")
	case "127.0.0.1":
		addr = "127.0.0.1"
		if !v4 {
			addr = "::1"
		}
	case "::1":
		addr = "::1"
		if !v6 {
			addr = "127.0.0.1"
		}
	default:
		return "", 0
	}
	return addr, uint32(n)
}

// ipFamilies are the proxy's IP families, as Istio's IP mode: IPv4 when
// it has no address of either.
func (b *builder) ipFamilies() (v4, v6 bool) {
	for _, ip := range b.p.IPs {
		if a := net.ParseIP(ip); a != nil {
			if a.To4() != nil {
				v4 = true
			} else {
				v6 = true
			}
		}
	}
	if !v4 && !v6 {
		v4 = true
	}
	return v4, v6
}

const unixPrefix = "unix://"

// ingressClusters are the inbound clusters of the Sidecar's ingress
// listeners, every one of them (captureMode NONE too, as Istio builds).
func (b *builder) ingressClusters(listeners []*networkingv1.IstioIngressListener) []resource.Resource {
	out := make([]resource.Resource, 0, len(listeners))
	sc := b.egress()
	for _, l := range listeners {
		name := inboundClusterName(l.GetPort().GetNumber())
		addr, port := b.ingressEndpoint(l)
		pool := inboundPool(sc.sidecar, l.GetPort().GetNumber())
		lp := ingressProtocol(l.GetPort().GetProtocol())
		out = append(out, resource.Resource{
			Name: name,
			Key:  key("cds", name, "ingress", sc.key, addr, strconv.FormatUint(uint64(port), 10)),
			Build: func() (proto.Message, error) {
				c := ingressCluster(name, addr, port)
				if err := applyInboundPool(c, pool, lp); err != nil {
					return nil, err
				}
				return c, nil
			},
		})
	}
	return out
}

// ingressCluster is the cluster of an ingress listener to addr:port
// (ORIGINAL_DST when addr is ""), as Istio's buildInboundCluster.
func ingressCluster(name, addr string, port uint32) *cluster.Cluster {
	if addr == "" {
		return originalDst(name, true)
	}
	var a *core.Address
	if path, ok := strings.CutPrefix(addr, unixPrefix); ok {
		a = &core.Address{Address: &core.Address_Pipe{Pipe: &core.Pipe{Path: path}}}
	} else {
		a = socketAddress(addr, port)
	}
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		ConnectTimeout:       connectTimeout,
		CircuitBreakers:      unlimited(),
		LoadAssignment: &endpoint.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpoint.LocalityLbEndpoints{{LbEndpoints: []*endpoint.LbEndpoint{{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: a}},
			}}}},
		},
	}
	if addr != "127.0.0.1" && addr != "::1" {
		c.UpstreamBindConfig = &core.BindConfig{SourceAddress: &core.SocketAddress{
			Address: inboundBindAddress, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 0},
		}}
	}
	return c
}

// ingressScope is what of the proxy's addresses its ingress chains and
// clusters read: the name of chains without bind, and the address each
// default endpoint resolves to (the proxy's own for "0.0.0.0" and "::",
// the loopback of its family for "127.0.0.1" and "::1"); "" without
// ingress listeners.
func (b *builder) ingressScope(listeners []*networkingv1.IstioIngressListener) string {
	if len(listeners) == 0 {
		return ""
	}
	parts := []string{b.inboundBindName()}
	for _, l := range listeners {
		if addr, _ := b.ingressEndpoint(l); addr != "" && !strings.HasPrefix(addr, unixPrefix) {
			parts = append(parts, addr)
		}
	}
	return strings.Join(parts, ",")
}
