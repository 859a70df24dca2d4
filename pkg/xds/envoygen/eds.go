package envoygen

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// transportSocketMatchKey is the endpoint metadata a cluster's
// transport_socket_matches read.
const transportSocketMatchKey = "envoy.transport_socket_match"

// endpoints returns a ClusterLoadAssignment for every outbound cluster of
// EDS type, empty when the service has no endpoints, so that no cluster
// warms forever. Its content depends on the cluster alone, so every proxy
// shares it.
func (b *builder) endpoints() []resource.Resource {
	return b.loadAssignments(b.outboundClusters())
}

// namedEndpoints is endpoints() of the clusters named, without listing
// every cluster: a proxy that subscribes to one more cluster's endpoints,
// or the load assignments of one service whose endpoints changed, cost
// what they are.
func (b *builder) namedEndpoints(names []string) []resource.Resource {
	var ocs []outboundCluster
	for _, n := range names {
		if oc, ok := b.outboundClusterNamed(n); ok {
			ocs = append(ocs, oc)
		}
	}
	return b.loadAssignments(ocs)
}

// namedClusters is clusters() of the outbound clusters named.
func (b *builder) namedClusters(names []string) []resource.Resource {
	var out []resource.Resource
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		if oc, ok := b.outboundClusterNamed(n); ok {
			out = append(out, b.outboundClusterResource(oc))
		}
	}
	return out
}

func (b *builder) loadAssignments(ocs []outboundCluster) []resource.Resource {
	var out []resource.Resource
	for _, oc := range ocs {
		if b.tlsOf(oc) == tlsRefused || oc.headless() || !oc.edsLoadAssignment() {
			continue // a static cluster without endpoints, ORIGINAL_DST, or DNS
		}
		// The endpoints depend on the rule that defines a subset or says
		// how to reach them, which the client's namespace chooses.
		k := key("eds", oc.name)
		if oc.dr != nil {
			k = key("eds", oc.name, oc.dr.Key())
		}
		if net := b.network(); net != "" {
			k += "|net:" + net // other networks' endpoints are left out
		}
		if oc.svc.Headless {
			k += "|router" // only routers have a headless service's
		}
		out = append(out, resource.Resource{Name: oc.name, Key: k, Encode: func() ([]byte, error) {
			return b.loadAssignment(oc)
		}})
	}
	return out
}

// loadAssignment encodes oc's ClusterLoadAssignment directly (see
// wire.go): the endpoints by locality, localities in order, each endpoint
// healthy with its weight and, when it accepts Istio mTLS, the mark the
// cluster's transport socket match selects.
func (b *builder) loadAssignment(oc outboundCluster) ([]byte, error) {
	mtlsMark, err := mtlsEndpointMark()
	if err != nil {
		return nil, err
	}
	var subsetLabels map[string]string
	if oc.subset != nil {
		subsetLabels = oc.subset.GetLabels()
	}
	type group struct {
		region, zone, subzone string
		endpoints             []model.Endpoint
		weight                uint32
	}
	var groups []*group
	network := b.network()
	for _, ep := range oc.svc.Endpoints[oc.port.Port] {
		if oc.subset != nil && !model.Matches(subsetLabels, ep.Labels) {
			continue
		}
		if !model.InNetwork(network, ep.Network) {
			continue // no east-west gateway: not reachable
		}
		region, rest, _ := strings.Cut(ep.Locality, "/")
		zone, subzone, _ := strings.Cut(rest, "/")
		i := slices.IndexFunc(groups, func(g *group) bool { return g.region == region && g.zone == zone && g.subzone == subzone })
		if i < 0 {
			i = len(groups)
			groups = append(groups, &group{region: region, zone: zone, subzone: subzone})
		}
		groups[i].endpoints = append(groups[i].endpoints, ep)
		groups[i].weight += max(ep.Weight, 1)
	}
	slices.SortFunc(groups, func(x, y *group) int {
		return cmp.Or(cmp.Compare(x.region, y.region), cmp.Compare(x.zone, y.zone), cmp.Compare(x.subzone, y.subzone))
	})
	w := make(wire, 0, 64+len(oc.name)+len(oc.svc.Endpoints[oc.port.Port])*64)
	w = w.str(claClusterName, oc.name)
	for _, g := range groups {
		var l, loc int
		w, l = w.open(claEndpoints)
		w, loc = w.open(localityLocality)
		w = w.str(localityRegion, g.region).str(localityZone, g.zone).str(localitySubZone, g.subzone).close(loc)
		for _, ep := range g.endpoints {
			var lb, e, addr, sock, weight int
			w, lb = w.open(localityLbEndpoints)
			w, e = w.open(lbEndpointEndpoint)
			w, addr = w.open(endpointAddress)
			w, sock = w.open(addressSocketAddress)
			w = w.str(socketAddressAddress, ep.Address).varint(socketAddressPort, uint64(ep.Port)).close(sock).close(addr).close(e)
			w = w.varint(lbEndpointHealth, uint64(core.HealthStatus_HEALTHY))
			if b.acceptsMTLS(oc, ep) {
				w = append(w, mtlsMark...)
			}
			w, weight = w.open(lbEndpointWeight)
			w = w.varint(uint32Value, uint64(max(ep.Weight, 1))).close(weight).close(lb)
		}
		var weight int
		w, weight = w.open(localityWeight)
		w = w.varint(uint32Value, uint64(g.weight)).close(weight).close(l)
	}
	return w, nil
}

// network is the proxy's network: its workload's topology.istio.io/network
// label (the injector sets it to the network it injects for); empty when
// unknown.
func (b *builder) network() string { return b.p.Labels[model.NetworkLabel] }

// Field numbers of envoy.config.endpoint.v3.ClusterLoadAssignment and of
// what it nests.
const (
	claClusterName       = 1 // ClusterLoadAssignment.cluster_name
	claEndpoints         = 2 // ClusterLoadAssignment.endpoints
	localityLocality     = 1 // LocalityLbEndpoints.locality
	localityLbEndpoints  = 2 // LocalityLbEndpoints.lb_endpoints
	localityWeight       = 3 // LocalityLbEndpoints.load_balancing_weight
	localityRegion       = 1 // core.Locality.region
	localityZone         = 2 // core.Locality.zone
	localitySubZone      = 3 // core.Locality.sub_zone
	lbEndpointEndpoint   = 1 // LbEndpoint.endpoint
	lbEndpointHealth     = 2 // LbEndpoint.health_status
	lbEndpointWeight     = 4 // LbEndpoint.load_balancing_weight
	endpointAddress      = 1 // Endpoint.address
	addressSocketAddress = 1 // core.Address.socket_address
	socketAddressAddress = 2 // core.SocketAddress.address
	socketAddressPort    = 3 // core.SocketAddress.port_value
	uint32Value          = 1 // UInt32Value.value
)

// mtlsEndpointMark is the metadata of an endpoint marked for Istio mTLS,
// which the "tlsMode-istio" transport socket match selects, as a field of
// LbEndpoint; marshalled once, as most endpoints of a mesh carry it.
var mtlsEndpointMark = sync.OnceValues(func() (resource.Preencoded, error) {
	return resource.Preencode(&endpoint.LbEndpoint{
		Metadata: &core.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: tlsModeMatch()}},
	})
})

// acceptsMTLS reports whether ep is marked for Istio mTLS, as Istio's
// endpoint builder decides: the workload must carry the sidecar's tlsMode
// label; then a DestinationRule's TLS mode decides (ISTIO_MUTUAL keeps the
// mark, any other drops it), else its PeerAuthentication for the port
// must not disable mTLS.
func (b *builder) acceptsMTLS(oc outboundCluster, ep model.Endpoint) bool {
	if ep.TLSMode() != tlsModeIstio {
		return false
	}
	if s := oc.tlsSettings(); s != nil {
		return s.GetMode() == networkingv1.ClientTLSSettings_ISTIO_MUTUAL
	}
	return b.snap.MTLSMode(ep.Namespace, ep.Labels, ep.Port) != model.MTLSDisable
}
