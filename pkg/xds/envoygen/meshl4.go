package envoygen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// The tls and tcp rules of mesh VirtualServices on a sidecar's outbound
// listeners (routes.SidecarL4Routes says which apply): chains chosen by
// SNI or destination subnets before the listener's default, and a rule
// matching every connection as that default, as Istio's
// buildListenerFromEntry lays them out.

// meshL4 returns what the VirtualServices the proxy sees make of port sp
// of svc; nil when they change nothing.
func (b *builder) meshL4(svc *model.Service, sp model.Port) *routes.SidecarL4 {
	b.l4Once.Do(func() {
		// Without a Sidecar, one look through the mesh spares listing
		// every VirtualService; with one, its few are looked at alone.
		if b.egress().vs == nil && !routes.HasL4(b.snap) {
			return
		}
		b.l4VS = routes.L4VirtualServices(b.snap, b.appliedMeshVirtualServices())
	})
	if len(b.l4VS) == 0 {
		return nil
	}
	l4 := routes.SidecarL4Routes(b.snap, b.l4VS, svc.Hostname, sp.Port, tlsPort(sp), routes.Proxy{Namespace: b.p.Namespace, Labels: b.p.Labels})
	if l4.Empty() {
		return nil
	}
	return l4
}

// claimed reports whether the entry's default chain is taken: by a
// service's cluster or by a VirtualService's route.
func (e *outboundEntry) claimed() bool { return e.cluster != "" || e.def != nil }

// addChains appends chains a later service brings to the listener, but
// not one Envoy could not tell from an earlier chain (Istio's
// mergeTCPFilterChains keeps the first of identical ones; of partly
// overlapping ones Envoy would refuse the listener).
func (e *outboundEntry) addChains(chains []routes.L4Route) {
	for _, c := range chains {
		clash := false
		for _, cur := range e.chains {
			if routes.ChainsOverlap(cur, c) != "" {
				clash = true
				break
			}
		}
		if !clash {
			e.chains = append(e.chains, c)
		}
	}
}

// routed reports whether the listener is more than one service's
// tcp_proxy chain (and maybe its sniffed HTTP chain).
func (e *outboundEntry) routed() bool { return len(e.chains) > 0 || e.def != nil || e.cluster == "" }

// routedKey is the part of the listener's content key its chains make.
func (e *outboundEntry) routedKey() string {
	k := key("chains", e.fallback)
	add := func(r routes.L4Route) {
		k = key(k, strings.Join(r.SNIHosts, ","), strings.Join(r.DestinationCIDRs, ","), r.VirtualService.Namespace+"/"+r.VirtualService.Name, strconv.FormatBool(r.Named))
		for _, d := range r.Destinations {
			k = key(k, d.Cluster, strconv.FormatUint(uint64(d.Weight), 10))
		}
	}
	for _, c := range e.chains {
		add(c)
	}
	if e.def != nil {
		add(*e.def)
		k = key(k, "default")
	}
	return k
}

// routedListener is the listener of an entry with chains beyond the
// service's: those chosen by SNI or subnets, then the sniffed HTTP chain
// (if any), and as the default the VirtualService route matching every
// connection, else the first service's cluster, else fallback; a
// listener whose only chain is its default has it as its one chain.
func (e *outboundEntry) routedListener(t *Telemetry) resource.Resource {
	name, addr, port, chains, def, cluster, route, fallback := e.name(), e.addr, e.port, e.chains, e.def, e.cluster, e.route, e.fallback
	k := telemetryKey(t, "lds", name, cluster, route, e.routedKey())
	return resource.Resource{Name: name, Key: k, Build: func() (proto.Message, error) {
		l := outboundListenerShape()
		l.Name, l.Address = name, socketAddress(addr, port)
		needTLS := false
		for _, c := range chains {
			fc, err := l4RouteChain(c, t)
			if err != nil {
				return nil, err
			}
			l.FilterChains = append(l.FilterChains, fc)
			needTLS = needTLS || len(c.SNIHosts) > 0
		}
		if route != "" {
			f, err := outboundHCM(name, route, t)
			if err != nil {
				return nil, err
			}
			l.FilterChains = append(l.FilterChains, &listener.FilterChain{
				FilterChainMatch: &listener.FilterChainMatch{TransportProtocol: transportRaw, ApplicationProtocols: plainHTTPALPNs},
				Filters:          []*listener.Filter{f},
			})
		}
		var dfc *listener.FilterChain
		switch {
		case def != nil:
			fc, err := l4RouteChain(*def, t)
			if err != nil {
				return nil, err
			}
			dfc = fc
			needTLS = needTLS || len(def.SNIHosts) > 0
		case cluster != "":
			filters, err := t.tcpChain(sidecarOutbound, nil, cluster, cluster, true)
			if err != nil {
				return nil, err
			}
			dfc = &listener.FilterChain{Filters: filters}
		default:
			filters, err := t.tcpChain(sidecarOutbound, nil, fallback, fallback, true)
			if err != nil {
				return nil, err
			}
			dfc = &listener.FilterChain{Name: "PassthroughFilterChain", FilterChainMatch: &listener.FilterChainMatch{}, Filters: filters}
		}
		if len(l.FilterChains) == 0 {
			l.FilterChains = []*listener.FilterChain{dfc}
		} else {
			l.DefaultFilterChain = dfc
		}
		if needTLS {
			inspector, err := listenerFilter(tlsInspectorName, tlsInspectorConfig())
			if err != nil {
				return nil, err
			}
			l.ListenerFilters = append(l.ListenerFilters, inspector)
		}
		if route != "" {
			inspector, err := listenerFilter(httpInspectorName, httpInspectorConfig())
			if err != nil {
				return nil, err
			}
			l.ListenerFilters = append(l.ListenerFilters, inspector)
		}
		return l, nil
	}}
}

// l4RouteChain is the filter chain of route r: matched by its server
// names and destination subnets (none when it matches every connection),
// tcp_proxy to its destinations with the outbound telemetry, and the
// VirtualService's name in its metadata when Istio puts it there.
func l4RouteChain(r routes.L4Route, t *Telemetry) (*listener.FilterChain, error) {
	filters, err := t.tcpFilters(sidecarOutbound, nil, tcpProxyTo(r), true)
	if err != nil {
		return nil, err
	}
	fc := &listener.FilterChain{Filters: filters}
	if !r.MatchesAll() {
		m := &listener.FilterChainMatch{ServerNames: r.ServerNames()}
		for _, p := range r.Prefixes() {
			m.PrefixRanges = append(m.PrefixRanges, &core.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))})
		}
		fc.FilterChainMatch = m
	}
	if r.Named && r.VirtualService.Name != "" {
		path := "/apis/networking.istio.io/v1/namespaces/" + r.VirtualService.Namespace + "/virtual-service/" + r.VirtualService.Name
		fc.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"istio": {Fields: map[string]*structpb.Value{"config": structpb.NewStringValue(path)}},
		}}
	}
	return fc, nil
}

// serviceRoute is the chain of the service of hostname's port chosen by
// its host name (an entry without addresses, on a TLS port).
func serviceRoute(hostname string, port uint32) routes.L4Route {
	return routes.L4Route{SNIHosts: []string{hostname}, Destinations: []routes.WeightedCluster{{Cluster: resource.ClusterName(hostname, "", port)}}}
}

// MeshL4Problems are the tls and tcp rules of the VirtualServices bound to
// "mesh" that some sidecar leaves out of a service port's listener
// (routes.SidecarL4Routes): their chain would be one Envoy cannot tell
// from an earlier one, or they route nowhere. Every VirtualService and
// client is assumed to see the others, so a problem is one some sidecar
// may have; each is listed once.
func (g *Generator) MeshL4Problems(snap *model.Snapshot) []routes.Problem {
	vss := routes.AllL4VirtualServices(snap)
	if len(vss) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var out []routes.Problem
	add := func(p routes.Problem) {
		if k := p.String(); !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	// The chains services without addresses bring to "0.0.0.0_<port>", in
	// the order outboundEntries adds them, with the host they are for.
	type owned struct {
		r    routes.L4Route
		host string
	}
	shared := map[uint32][]owned{}
	for _, svc := range snap.Services() {
		for _, sp := range svc.Ports {
			if p := protocolOf(sp); p != protoTCP && p != protoAuto {
				continue
			}
			l4 := routes.SidecarL4Routes(snap, vss, svc.Hostname, sp.Port, tlsPort(sp), routes.Proxy{AnySource: true})
			for _, p := range l4.Problems {
				add(p)
			}
			if len(entryListenerAddresses(svc)) == 0 {
				continue
			}
			chains := l4.Chains
			if !l4.Routed && sniChosen(svc, sp) {
				chains = append(chains, serviceRoute(svc.Hostname, sp.Port))
			}
			// A chain of another service's that Envoy could not tell from
			// this one keeps the listener: this one is left out.
			for _, c := range chains {
				for _, o := range shared[sp.Port] {
					if o.host == svc.Hostname || c.VirtualService.Name == "" || sameChain(o.r, c) {
						continue
					}
					if k := routes.ChainsOverlap(o.r, c); k != "" {
						add(routes.Problem{Kind: "VirtualService", Namespace: c.VirtualService.Namespace, Name: c.VirtualService.Name,
							Reason: fmt.Sprintf("a match for %s left out of sidecars' listener 0.0.0.0_%d: %s is already chosen for %s", svc.Hostname, sp.Port, k, o.host)})
						break
					}
				}
				shared[sp.Port] = append(shared[sp.Port], owned{c, svc.Hostname})
			}
		}
	}
	return out
}

// sameChain reports whether a and b are one rule's chain: nothing is lost
// when either is left out.
func sameChain(a, b routes.L4Route) bool {
	return a.VirtualService == b.VirtualService && slices.Equal(a.SNIHosts, b.SNIHosts) &&
		slices.Equal(a.DestinationCIDRs, b.DestinationCIDRs) && slices.Equal(a.Destinations, b.Destinations)
}
