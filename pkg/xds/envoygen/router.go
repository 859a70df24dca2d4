package envoygen

import (
	"slices"

	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// routerResources are the resources of typeURL of a router, those named
// and maybe more; nil for an unknown type. A router has the outbound
// clusters and load assignments a sidecar of its namespace and labels
// has (the same DestinationRules, auto-mTLS and credentials), and
// BlackHoleCluster; its listeners and routes are its Gateways'.
func (b *builder) routerResources(typeURL string, names []string, wildcard bool) []resource.Resource {
	switch typeURL {
	case resource.ClusterType:
		if !wildcard && !slices.ContainsFunc(names, func(n string) bool { return resource.ClusterHost(n) == "" }) {
			return append([]resource.Resource{}, b.namedClusters(names)...)
		}
		out := []resource.Resource{}
		for _, oc := range b.outboundClusters() {
			out = append(out, b.outboundClusterResource(oc))
		}
		out = append(out, b.sniDNATResources(typeURL)...) // an east-west gateway's (eastwest.go)
		return append(out, blackholeClusterResource())
	case resource.EndpointType:
		if !wildcard {
			return append([]resource.Resource{}, b.namedEndpoints(slices.Compact(slices.Sorted(slices.Values(names))))...)
		}
		return append(append([]resource.Resource{}, b.endpoints()...), b.sniDNATResources(typeURL)...)
	case resource.ListenerType:
		return append([]resource.Resource{}, b.gatewayListeners()...)
	case resource.RouteType:
		return append([]resource.Resource{}, b.gatewayRoutes()...)
	}
	return nil
}
