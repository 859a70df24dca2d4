package envoygen

import (
	"fmt"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
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
// workload). The router has an SNI-DNAT cluster, plaintext, of every
// port and subset of every service of the mesh it sees: EDS, or for a
// ServiceEntry resolved by DNS a DNS cluster of its resolution
// (STRICT_DNS, LOGICAL_DNS) with its endpoints inline, as Istio's
// buildOutboundSniDnatClusters; their endpoints are only those that
// accept Istio mTLS, so that nothing passes the gateway in plaintext.

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
// the mesh (not a ServiceEntry outside it, as Istio's).
func sniDNATService(svc *model.Service) bool {
	return !(outboundCluster{svc: svc}).external()
}

// sniDNATClusters are the router's SNI-DNAT clusters: each outbound
// cluster of a service sniDNATService admits, by its SNI name; but a
// LOGICAL_DNS one without an endpoint that accepts Istio mTLS, which
// Istio generates with no host and Envoy refuses (a LOGICAL_DNS cluster
// must have exactly one), failing the router's whole cluster update:
// Bulwark leaves it and its filter chain out (SNIDNATLeftOut reports it).
func (b *builder) sniDNATClusters() []outboundCluster {
	var out []outboundCluster
	for _, oc := range b.outboundClusters() {
		if !sniDNATService(oc.svc) {
			continue
		}
		oc.name = resource.SNIClusterName(oc.svc.Hostname, oc.subset.GetName(), oc.port.Port)
		oc.sniDNAT = true
		if t, ok := oc.dnsType(); ok && t == cluster.Cluster_LOGICAL_DNS && !b.anyMTLSEndpoint(oc) {
			continue
		}
		out = append(out, oc)
	}
	return out
}

// anyMTLSEndpoint reports whether one of oc's endpoints accepts Istio mTLS.
func (b *builder) anyMTLSEndpoint(oc outboundCluster) bool {
	for _, ep := range oc.svc.Endpoints[oc.port.Port] {
		if oc.subset != nil && !model.Matches(oc.subset.GetLabels(), ep.Labels) {
			continue
		}
		if b.acceptsMTLS(oc, ep) {
			return true
		}
	}
	return false
}

// SNIDNATLeftOut says, of each port of a ServiceEntry of the mesh
// resolved DNS_ROUND_ROBIN none of whose endpoints accepts Istio mTLS
// (security.istio.io/tlsMode: istio), that an east-west gateway has no
// SNI-DNAT cluster for it, when a Gateway of snap has an AUTO_PASSTHROUGH
// server. Sorted.
func SNIDNATLeftOut(snap *model.Snapshot) []string {
	if !hasAutoPassthrough(snap) {
		return nil
	}
	var out []string
	for _, svc := range snap.Services() {
		oc := outboundCluster{svc: svc}
		if t, ok := oc.dnsType(); !ok || t != cluster.Cluster_LOGICAL_DNS || oc.external() {
			continue
		}
		for _, p := range svc.Ports {
			if !slices.ContainsFunc(svc.Endpoints[p.Port], func(ep model.Endpoint) bool { return ep.TLSMode() == tlsModeIstio }) {
				out = append(out, fmt.Sprintf("ServiceEntry %s/%s port %d: resolved DNS_ROUND_ROBIN without an endpoint that accepts Istio mTLS: "+
					"east-west gateways get no SNI-DNAT cluster %s (Istio sends one with no host, which Envoy refuses)",
					svc.Namespace, svc.Name, p.Port, resource.SNIClusterName(svc.Hostname, "", p.Port)))
			}
		}
	}
	slices.Sort(out)
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
		out = append(out, b.outboundClusterResource(oc)) // EDS, or a DNS cluster (entry.go)
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
