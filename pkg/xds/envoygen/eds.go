package envoygen

import (
	"cmp"
	"math"
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
	gws := b.networkGateways()
	for _, oc := range ocs {
		if !oc.sniDNAT && (b.tlsOf(oc) == tlsRefused || oc.headless()) || !oc.edsLoadAssignment() {
			continue // a static cluster without endpoints, ORIGINAL_DST, or DNS
		}
		// The endpoints depend on the rule that defines a subset or says
		// how to reach them, which the client's namespace chooses.
		k := key("eds", oc.name)
		if oc.dr != nil {
			k = key("eds", oc.name, oc.dr.Key())
		}
		net := b.network()
		if gws.Enabled() {
			// Other networks' endpoints are their gateways.
			k += "|net:" + net + "|gw:" + gws.Key
		} else if net != "" {
			k += "|net:" + net // other networks' endpoints are left out
		}
		k += b.p.viewKey()
		if oc.svc.Headless {
			k += "|router" // only routers have a headless service's
		}
		out = append(out, resource.Resource{Name: oc.name, Key: k, Encode: func() ([]byte, error) {
			return b.loadAssignment(oc, gws)
		}})
	}
	return out
}

// networkGateways are the mesh's network gateways for this snapshot and
// meshNetworks.
func (b *builder) networkGateways() *model.NetworkGateways {
	return b.snap.NetworkGateways(b.g.Mesh.Networks)
}

// lbGroup is the endpoints of one locality, then the gateways that stand
// for the remote ones, with their summed weights.
type lbGroup struct {
	region, zone, subzone string
	endpoints             []lbMember
	gateways              []model.NetworkGateway
	gatewayWeights        map[model.NetworkGateway]uint32
	weight                uint32
}

// lbMember is an endpoint of an lbGroup: its address, its weight and
// whether it is marked for mTLS.
type lbMember struct {
	address      string
	port, weight uint32
	mtls         bool
}

// loadAssignment encodes oc's ClusterLoadAssignment directly (see
// wire.go): the endpoints by locality, localities in order, each endpoint
// healthy with its weight and, when it accepts Istio mTLS, the mark the
// cluster's transport socket match selects.
//
// With network gateways (split-horizon EDS, as Istio's endpoint builder):
// every weight is scaled by the gateways' ScaleFactor; an endpoint the
// proxy does not reach directly, because it is of another network that
// has gateways (or the proxy's network is unknown and the endpoint's has
// gateways), is replaced by those gateways, its weight split evenly among
// them, in its locality, marked for mTLS, if it accepts Istio mTLS; if it
// does not, it is left out, as traffic through a gateway is routed by the
// mTLS SNI alone. An endpoint of another network without gateways is
// left out too: Istio would send it as if it were reachable (see the
// README). An SNI-DNAT cluster (a router's AUTO_PASSTHROUGH) keeps only
// what accepts mTLS. Without any gateway, a proxy of a known network gets
// only the endpoints of its network and of none.
func (b *builder) loadAssignment(oc outboundCluster, gws *model.NetworkGateways) ([]byte, error) {
	mtlsMark, err := mtlsEndpointMark()
	if err != nil {
		return nil, err
	}
	var subsetLabels map[string]string
	if oc.subset != nil {
		subsetLabels = oc.subset.GetLabels()
	}
	var groups []*lbGroup
	network := b.network()
	multi := gws.Enabled()
	scale := uint32(1)
	if multi {
		scale = gws.ScaleFactor()
	}
	// Istio keeps a locality whose endpoints were all filtered out, empty,
	// when it filters by network or mTLS.
	keepEmpty := multi || oc.sniDNAT
	eps := oc.svc.Endpoints[oc.port.Port]
	for _, ep := range eps {
		if oc.subset != nil && !model.Matches(subsetLabels, ep.Labels) {
			continue
		}
		if !b.p.sees(ep.Network) {
			continue // not in its view: not even through a gateway
		}
		var epGws []model.NetworkGateway
		direct := model.InNetwork(network, ep.Network)
		if multi {
			epGws = gws.For(ep.Network, ep.Cluster)
			if network == "" && ep.Network != "" && len(epGws) > 0 {
				direct = false // an unknown network goes through the gateways there are
			}
		}
		if !direct && len(epGws) == 0 && !keepEmpty {
			continue // not reachable: no gateway
		}
		region, rest, _ := strings.Cut(ep.Locality, "/")
		zone, subzone, _ := strings.Cut(rest, "/")
		i := slices.IndexFunc(groups, func(g *lbGroup) bool { return g.region == region && g.zone == zone && g.subzone == subzone })
		if i < 0 {
			i = len(groups)
			groups = append(groups, &lbGroup{region: region, zone: zone, subzone: subzone})
			if i == 0 {
				// Most services have endpoints in one locality.
				groups[0].endpoints = make([]lbMember, 0, len(eps))
			}
		}
		g := groups[i]
		if !direct && len(epGws) == 0 {
			continue // not reachable: no gateway
		}
		mtls := b.acceptsMTLS(oc, ep)
		if (!direct || oc.sniDNAT) && !mtls {
			continue // through a gateway, or from one: mTLS alone
		}
		weight := scaledWeight(ep.Weight, scale)
		if direct {
			g.endpoints = append(g.endpoints, lbMember{address: ep.Address, port: ep.Port, weight: weight, mtls: mtls})
			g.weight = addWeight(g.weight, weight)
			continue
		}
		if g.gatewayWeights == nil {
			g.gatewayWeights = map[model.NetworkGateway]uint32{}
		}
		share := weight / uint32(len(epGws))
		for _, gw := range epGws {
			if _, ok := g.gatewayWeights[gw]; !ok {
				g.gateways = append(g.gateways, gw)
			}
			g.gatewayWeights[gw] += share
		}
	}
	for _, g := range groups {
		slices.SortFunc(g.gateways, func(x, y model.NetworkGateway) int {
			return cmp.Or(cmp.Compare(x.Address, y.Address), cmp.Compare(x.Port, y.Port), cmp.Compare(x.Network, y.Network), cmp.Compare(x.Cluster, y.Cluster))
		})
		for _, gw := range g.gateways {
			if g.gatewayWeights[gw] == 0 {
				g.gatewayWeights[gw] = 1 // as Istio: a gateway's weight is never 0
			}
			g.weight = addWeight(g.weight, g.gatewayWeights[gw])
		}
	}
	slices.SortFunc(groups, func(x, y *lbGroup) int {
		return cmp.Or(cmp.Compare(x.region, y.region), cmp.Compare(x.zone, y.zone), cmp.Compare(x.subzone, y.subzone))
	})
	w := make(wire, 0, 64+len(oc.name)+len(oc.svc.Endpoints[oc.port.Port])*64)
	w = w.str(claClusterName, oc.name)
	for _, g := range groups {
		var l, loc int
		w, l = w.open(claEndpoints)
		w, loc = w.open(localityLocality)
		w = w.str(localityRegion, g.region).str(localityZone, g.zone).str(localitySubZone, g.subzone).close(loc)
		for _, m := range g.endpoints {
			w = lbEndpoint(w, m.address, m.port, m.weight, m.mtls, mtlsMark)
		}
		for _, gw := range g.gateways {
			w = lbEndpoint(w, gw.Address, gw.Port, g.gatewayWeights[gw], true, mtlsMark)
		}
		if len(g.endpoints)+len(g.gateways) > 0 {
			var weight int
			w, weight = w.open(localityWeight)
			w = w.varint(uint32Value, uint64(g.weight)).close(weight)
		}
		w = w.close(l)
	}
	return w, nil
}

// lbEndpoint appends an LbEndpoint at address:port, healthy, with weight,
// marked for mTLS when mtls.
func lbEndpoint(w wire, address string, port, weight uint32, mtls bool, mtlsMark []byte) wire {
	var lb, e, addr, sock, wt int
	w, lb = w.open(localityLbEndpoints)
	w, e = w.open(lbEndpointEndpoint)
	w, addr = w.open(endpointAddress)
	w, sock = w.open(addressSocketAddress)
	w = w.str(socketAddressAddress, address).varint(socketAddressPort, uint64(port)).close(sock).close(addr).close(e)
	w = w.varint(lbEndpointHealth, uint64(core.HealthStatus_HEALTHY))
	if mtls {
		w = append(w, mtlsMark...)
	}
	w, wt = w.open(lbEndpointWeight)
	return w.varint(uint32Value, uint64(weight)).close(wt).close(lb)
}

// scaledWeight is an endpoint's weight (1 when unset) times scale, at
// most the largest uint32, as Istio scales it.
func scaledWeight(weight, scale uint32) uint32 {
	return uint32(min(uint64(max(weight, 1))*uint64(scale), math.MaxUint32))
}

// addWeight adds without overflow, as Istio sums a locality's weights.
func addWeight(a, b uint32) uint32 {
	return uint32(min(uint64(a)+uint64(b), math.MaxUint32))
}

// network is the proxy's network: its node metadata NETWORK, else its
// workload's topology.istio.io/network label, which carries its registry
// pod's network (the pod's label, else its cluster's); empty when unknown.
// Istio's endpoint builder reads NETWORK alone.
func (b *builder) network() string { return cmp.Or(b.p.Network, b.p.Labels[model.NetworkLabel]) }

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

// sees reports whether the proxy's network view includes network: every
// network without a view, and the endpoints of no network always.
func (p *Proxy) sees(network string) bool {
	return p.NetworkView == nil || network == "" || slices.Contains(p.NetworkView, network)
}

// viewKey is the part of a cache key its network view makes: "" without
// one, so that proxies without a view keep sharing what they share.
func (p *Proxy) viewKey() string {
	if p.NetworkView == nil {
		return ""
	}
	return string(appendPart([]byte("|view|"), strings.Join(p.NetworkView, ",")))
}
