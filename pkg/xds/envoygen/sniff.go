package envoygen

import (
	"net/netip"
	"slices"
	"strconv"
	"sync"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// outboundEntry is an outbound listener bound to one address and port,
// "<address>_<port>": a service's virtual IP, or an endpoint of a
// headless service. A TCP port gives it a tcp_proxy chain; a port whose
// protocol is not declared gives it that chain and an HTTP one the HTTP
// inspector picks for plaintext HTTP/1.1 and h2c, routed by the RDS
// route "<host>:<port>" of that service alone (Istio's sniffing).
type outboundEntry struct {
	addr    string
	port    uint32
	lname   string // name(), made once
	cluster string // the tcp_proxy chain's, the listener's default
	// route is the HTTP chain's RDS route, "" for none; svc and svcPort
	// are what it routes to.
	route   string
	svc     *model.Service
	svcPort model.Port
	// chains are chosen by SNI or destination subnets: of ServiceEntry
	// hosts without addresses on a TLS port (entry.go), and of
	// VirtualServices' tls and tcp rules (meshl4.go). def is a
	// VirtualService route taking every other connection, in place of
	// cluster; fallback takes them when neither is set.
	chains   []routes.L4Route
	def      *routes.L4Route
	fallback string
}

func (e *outboundEntry) name() string {
	if e.lname == "" {
		return listenerName(e.addr, e.port)
	}
	return e.lname
}

// outboundEntries are the listeners bound to an address, in the order of
// the services that first claim them. As Istio's buildSidecarOutboundListeners does:
//   - a service with virtual IPs gets one per IP and TCP or undeclared
//     port; HTTP ports of every service share "0.0.0.0_<port>" instead;
//   - a headless service (cluster IP None) gets one per endpoint address and
//     TCP or undeclared port, named with the service port, but none for
//     the proxy's own address (its application reaching itself does not
//     pass the outbound listener);
//   - services that claim one address and port share its listener: the
//     first service (by hostname) with a TCP chain keeps it, and the first
//     with an HTTP chain keeps that, so a TCP port and an undeclared port
//     make one sniffed listener.
func (b *builder) outboundEntries() []*outboundEntry {
	byName := map[string]*outboundEntry{}
	var out []*outboundEntry
	entry := func(addr string, port uint32) *outboundEntry {
		name := listenerName(addr, port)
		if cur := byName[name]; cur != nil {
			return cur
		}
		e := &outboundEntry{addr: addr, port: port, lname: name, fallback: b.fallbackCluster()}
		byName[name] = e
		out = append(out, e)
		return e
	}
	// add gives the listener of addr the chains of sp of svc: l4's (the
	// VirtualServices'), else its own cluster, or, with sni, its own
	// chain chosen by its host name.
	add := func(addr string, svc *model.Service, sp model.Port, sniffed, sni bool, l4 *routes.SidecarL4) {
		e := entry(addr, sp.Port)
		switch {
		case l4 != nil:
			e.addChains(l4.Chains)
			if l4.Default != nil && !e.claimed() {
				e.def = l4.Default
			} else if l4.Default == nil && !l4.Routed && sni {
				e.addChains([]routes.L4Route{serviceRoute(svc.Hostname, sp.Port)})
			} else if l4.Default == nil && !l4.Routed && !e.claimed() {
				e.cluster = resource.ClusterName(svc.Hostname, "", sp.Port)
			}
		case sni:
			e.addChains([]routes.L4Route{serviceRoute(svc.Hostname, sp.Port)})
		case !e.claimed():
			e.cluster = resource.ClusterName(svc.Hostname, "", sp.Port)
		}
		if sniffed && e.route == "" {
			e.route = sniffedRouteName(svc.Hostname, sp.Port)
			e.svc, e.svcPort = svc, sp
		}
	}
	self := b.selfAddress()
	// The ports of "0.0.0.0_<port>" HTTP listeners, which a ServiceEntry's
	// TCP port does not take; listed when an entry asks.
	httpPorts := sync.OnceValue(b.httpPorts)
	for _, svc := range b.listenerServices() {
		for _, sp := range svc.Ports {
			proto := protocolOf(sp)
			if proto != protoTCP && proto != protoAuto {
				continue
			}
			sniffed := proto == protoAuto
			l4 := b.meshL4(svc, sp)
			for _, vip := range svc.Addresses {
				add(vip, svc, sp, sniffed, false, l4)
			}
			if addrs := entryListenerAddresses(svc); len(addrs) > 0 {
				if slices.Contains(httpPorts(), sp.Port) {
					continue
				}
				add(addrs[0], svc, sp, sniffed, sniChosen(svc, sp), l4)
			}
			if !svc.Headless {
				continue
			}
			for _, ep := range svc.Endpoints[sp.Port] {
				if validIP(ep.Address) && ep.Address != self {
					add(ep.Address, svc, sp, sniffed, false, l4)
				}
			}
		}
	}
	return out
}

// selfAddress is the proxy's first address, which Istio compares with an
// endpoint's first to leave out the listener to itself.
func (b *builder) selfAddress() string {
	if len(b.p.IPs) == 0 {
		return ""
	}
	return b.p.IPs[0]
}

// selfIsHeadlessEndpoint reports whether the proxy's own address is an
// endpoint of a headless service's TCP or undeclared port: then its
// listeners lack the one to that address, which others' have.
func (b *builder) selfIsHeadlessEndpoint() bool {
	self := b.selfAddress()
	if self == "" {
		return false
	}
	for _, svc := range b.snap.Services() {
		if !svc.Headless {
			continue
		}
		for _, sp := range svc.Ports {
			if proto := protocolOf(sp); proto != protoTCP && proto != protoAuto {
				continue
			}
			for _, ep := range svc.Endpoints[sp.Port] {
				if ep.Address == self {
					return true
				}
			}
		}
	}
	return false
}

func validIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// sniffedRouteName is Istio's RDS name for the HTTP chain sniffed on a
// service's own listener: "<host>:<port>".
func sniffedRouteName(host string, port uint32) string {
	var digits [20]byte // a concatenation allocates once
	return host + ":" + string(strconv.AppendUint(digits[:0], uint64(port), 10))
}

// listener is the entry's Listener: the tcp_proxy chain alone, or, when
// sniffed, the HTTP chain for what the HTTP inspector calls plaintext
// HTTP and the tcp_proxy chain as the default for everything else.
func (e *outboundEntry) listener(t *Telemetry) resource.Resource {
	if e.routed() {
		return e.routedListener(t)
	}
	name, addr, port, cluster, route := e.name(), e.addr, e.port, e.cluster, e.route
	if route == "" {
		// One per TCP service port of the mesh: encoded directly.
		return resource.Resource{Name: name, Key: telemetryKey(t, "lds", name, cluster), Encode: func() ([]byte, error) {
			return tcpListenerWire(name, addr, port, cluster, t)
		}}
	}
	return resource.Resource{Name: name, Key: telemetryKey(t, "lds", name, cluster, route), Build: func() (proto.Message, error) {
		tcp, err := t.tcpChain(sidecarOutbound, nil, cluster, cluster, true)
		if err != nil {
			return nil, err
		}
		l := outboundListenerShape()
		l.Name, l.Address = name, socketAddress(addr, port)
		tcpChain := &listener.FilterChain{Filters: tcp}
		f, err := outboundHCM(name, route, t)
		if err != nil {
			return nil, err
		}
		inspector, err := listenerFilter(httpInspectorName, httpInspectorConfig())
		if err != nil {
			return nil, err
		}
		l.FilterChains = []*listener.FilterChain{{
			FilterChainMatch: &listener.FilterChainMatch{TransportProtocol: transportRaw, ApplicationProtocols: plainHTTPALPNs},
			Filters:          []*listener.Filter{f},
		}}
		l.DefaultFilterChain = tcpChain
		l.ListenerFilters = []*listener.ListenerFilter{inspector}
		return l, nil
	}}
}
