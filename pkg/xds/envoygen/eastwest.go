package envoygen

import (
	"strings"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// An east-west gateway is a router with an AUTO_PASSTHROUGH server
// (typically port 15443, hosts "*.local"), as Istio generates it: its
// listener has a filter chain per SNI-DNAT cluster of a service the
// server's hosts match, chosen by the SNI "outbound_.<port>_.<subset>_.<host>"
// that another network's sidecar sends with its mTLS (the name of that
// sidecar's cluster as an SNI) and by an Istio mTLS ALPN, with tcp_proxy
// to the cluster of that name, without TLS of its own and without
// authorization (the connection's mTLS ends, and is authorized, at the
// workload). The router has an SNI-DNAT cluster, plaintext EDS, of every
// port and subset of every service it sees; their load assignments keep
// only the endpoints that accept Istio mTLS, so that nothing passes the
// gateway in plaintext.

// autoPassthroughServer reports whether srv is an AUTO_PASSTHROUGH one.
func autoPassthroughServer(srv *networkingv1.Server) bool {
	return srv.GetTls() != nil && srv.GetTls().GetMode() == networkingv1.ServerTLSSettings_AUTO_PASSTHROUGH
}

// autoPassthrough reports whether the proxy is a router one of whose
// served servers is AUTO_PASSTHROUGH: it then has SNI-DNAT clusters
// (Istio's ContainsAutoPassthroughGateways).
func (b *builder) autoPassthrough() bool {
	if !b.p.Router {
		return false
	}
	for _, l := range b.merged().listeners {
		for _, s := range l.servers {
			if autoPassthroughServer(s.server) {
				return true
			}
		}
	}
	return false
}

// sniDNATService reports whether svc has SNI-DNAT clusters: a service of
// the mesh whose endpoints come by EDS (not one outside the mesh, as
// Istio's, and not one resolved by DNS, which Bulwark leaves out).
func sniDNATService(svc *model.Service) bool {
	oc := outboundCluster{svc: svc}
	return !oc.external() && oc.edsLoadAssignment()
}

// sniDNATClusters are the router's SNI-DNAT clusters: each outbound
// cluster of a service sniDNATService admits, by its SNI name.
func (b *builder) sniDNATClusters() []outboundCluster {
	var out []outboundCluster
	for _, oc := range b.outboundClusters() {
		if !sniDNATService(oc.svc) {
			continue
		}
		oc.name = resource.SNIClusterName(oc.svc.Hostname, oc.subset.GetName(), oc.port.Port)
		oc.sniDNAT = true
		out = append(out, oc)
	}
	return out
}

// autoPassthroughRoutes are the routes of AUTO_PASSTHROUGH server s: to
// each SNI-DNAT cluster of a service one of its hosts matches, by the
// cluster's name as SNI.
func (b *builder) autoPassthroughRoutes(s *gwServer) []routes.L4Route {
	var out []routes.L4Route
	for _, oc := range b.sniDNATClusters() {
		if !s.matchesService(oc.svc.Hostname) {
			continue
		}
		out = append(out, routes.L4Route{
			SNIHosts:     []string{oc.name},
			Destinations: []routes.WeightedCluster{{Cluster: oc.name}},
		})
	}
	return out
}

// matchesService reports whether one of the server's hosts, without its
// namespace part, matches hostname: "*", the same name, or "*.<suffix>"
// of which hostname is under (Istio's host SubsetOf).
func (s *gwServer) matchesService(hostname string) bool {
	if s.sni == nil {
		return true // "*"
	}
	hostname = strings.ToLower(hostname)
	for _, h := range s.sni {
		if h == hostname {
			return true
		}
		if suffix, ok := strings.CutPrefix(h, "*"); ok && strings.HasSuffix(hostname, suffix) {
			return true
		}
	}
	return false
}

// sniDNATResources are the router's SNI-DNAT clusters, or their load
// assignments, as resources of typeURL; none without AUTO_PASSTHROUGH.
func (b *builder) sniDNATResources(typeURL string) []resource.Resource {
	if !b.autoPassthrough() {
		return nil
	}
	ocs := b.sniDNATClusters()
	if typeURL == resource.EndpointType {
		return b.loadAssignments(ocs)
	}
	out := make([]resource.Resource, 0, len(ocs))
	for _, oc := range ocs {
		out = append(out, b.outboundEDSCluster(oc))
	}
	return out
}

// hasAutoPassthrough reports whether a Gateway of snap has an
// AUTO_PASSTHROUGH server: some router may then have SNI-DNAT clusters.
func hasAutoPassthrough(snap *model.Snapshot) bool {
	for _, gw := range snap.Resources().Gateways {
		for _, srv := range gw.Spec.GetServers() {
			if autoPassthroughServer(srv) {
				return true
			}
		}
	}
	return false
}
