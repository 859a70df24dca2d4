package envoygen

import (
	"fmt"
	"slices"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// l4Routes finds the VirtualService routes of the servers of l that are
// not HTTP, in server order: PASSTHROUGH servers get a route per `tls`
// match, the SNI names of one port routed once (the first claims them);
// TCP servers, with or without TLS termination, the first `tcp` rule
// that applies. It returns what is left out.
func (b *builder) l4Routes(l *gwListener) []routes.Problem {
	var problems []routes.Problem
	// The names terminated servers take on the port are not routed
	// through again: Envoy refuses two chains with one SNI match.
	claimed := map[string]bool{}
	for _, s := range l.servers {
		if s.kind == kindTLS && !passthrough(s.server) {
			for _, n := range s.sni {
				claimed[s.server.GetBind()+"/"+n] = true
			}
		}
	}
	o := b.g.Mesh.Routes
	for _, s := range l.servers {
		var ps []routes.Problem
		switch {
		case s.kind == kindHTTP || s.terminatesHTTPS():
			continue
		case autoPassthroughServer(s.server):
			s.l4 = b.autoPassthroughRoutes(s)
		case passthrough(s.server):
			s.l4, ps = o.GatewayTLSRoutes(b.snap, s.gw, s.server, b.p.Namespace, claimed)
		default:
			var r *routes.L4Route
			r, ps = o.GatewayTCPRoutes(b.snap, s.gw, s.server, b.p.Namespace)
			if r != nil {
				s.l4 = []routes.L4Route{*r}
			}
		}
		problems = append(problems, ps...)
		// A route whose chain Envoy would refuse (an SNI name it does
		// not take) is left out alone, not the listener with it.
		s.l4 = slices.DeleteFunc(s.l4, func(r routes.L4Route) bool {
			fc, err := b.tel.l4Chain(s, r, nil)
			if err == nil {
				err = fc.ValidateAll()
			}
			if err != nil {
				problems = append(problems, routes.Problem{Kind: "VirtualService", Namespace: r.VirtualService.Namespace, Name: r.VirtualService.Name,
					Reason: fmt.Sprintf("route to %s left out of gateway %s/%s port %d: %v", r.Destinations[0].Cluster, s.gw.Namespace, s.gw.Name, s.server.GetPort().GetNumber(), err)})
				return true
			}
			return false
		})
	}
	return problems
}

// l4Chain is the filter chain of route r of server s: matched by the
// route's SNI names (PASSTHROUGH) or the server's (TLS termination),
// the server's TLS context when it terminates, then the network RBAC
// filters of the router's AuthorizationPolicies and tcp_proxy, as Istio
// builds them for gateways, with the telemetry of t.
func (t *Telemetry) l4Chain(s *gwServer, r routes.L4Route, rbac []*listener.Filter) (*listener.FilterChain, error) {
	auto := autoPassthroughServer(s.server)
	if auto {
		rbac = nil // as Istio's: the connection's own mTLS is checked where it ends
	}
	filters, err := t.tcpFilters(gatewayClass, rbac, tcpProxyTo(r), true)
	if err != nil {
		return nil, err
	}
	fc := &listener.FilterChain{Filters: filters, TransportSocketConnectTimeout: gatewayChainConnectTimeout}
	sni := r.SNIHosts
	if !passthrough(s.server) {
		sni = s.sni
		if s.tls != nil {
			ts, err := transportSocket(tlsSocketName, s.tls)
			if err != nil {
				return nil, err
			}
			fc.TransportSocket = ts
		}
	}
	if len(sni) > 0 {
		fc.FilterChainMatch = &listener.FilterChainMatch{ServerNames: slices.Clone(sni)}
	}
	if auto {
		fc.FilterChainMatch.ApplicationProtocols = slices.Clone(istioALPNs)
	}
	return fc, nil
}

// tcpProxyTo is tcp_proxy to r's destinations: its cluster's stat
// prefix for one, the VirtualService's "<name>.<namespace>" for several
// by weight.
func tcpProxyTo(r routes.L4Route) *tcpproxy.TcpProxy {
	tp := &tcpproxy.TcpProxy{}
	if len(r.Destinations) == 1 {
		tp.StatPrefix = r.Destinations[0].Cluster
		tp.ClusterSpecifier = &tcpproxy.TcpProxy_Cluster{Cluster: r.Destinations[0].Cluster}
	} else {
		tp.StatPrefix = r.VirtualService.Name + "." + r.VirtualService.Namespace
		w := &tcpproxy.TcpProxy_WeightedCluster{}
		for _, d := range r.Destinations {
			w.Clusters = append(w.Clusters, &tcpproxy.TcpProxy_WeightedCluster_ClusterWeight{Name: d.Cluster, Weight: d.Weight})
		}
		tp.ClusterSpecifier = &tcpproxy.TcpProxy_WeightedClusters{WeightedClusters: w}
	}
	return tp
}
