package envoygen

import (
	"cmp"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
	var out []resource.Resource
	for _, oc := range b.outboundClusters() {
		if b.tlsOf(oc) == tlsRefused || oc.headless() {
			continue // a static cluster without endpoints, or ORIGINAL_DST
		}
		// The endpoints depend on the rule that defines a subset or says
		// how to reach them, which the client's namespace chooses.
		k := key("eds", oc.name)
		if oc.dr != nil {
			k = key("eds", oc.name, oc.dr.Namespace, oc.dr.Name)
		}
		out = append(out, resource.Resource{Name: oc.name, Key: k, Build: func() (proto.Message, error) {
			return b.loadAssignment(oc), nil
		}})
	}
	return out
}

func (b *builder) loadAssignment(oc outboundCluster) *endpoint.ClusterLoadAssignment {
	var subsetLabels map[string]string
	if oc.subset != nil {
		subsetLabels = oc.subset.GetLabels()
	}
	byLocality := map[string]*endpoint.LocalityLbEndpoints{}
	for _, ep := range oc.svc.Endpoints[oc.port.Port] {
		if oc.subset != nil && !model.Matches(subsetLabels, ep.Labels) {
			continue
		}
		loc := byLocality[ep.Locality]
		if loc == nil {
			loc = &endpoint.LocalityLbEndpoints{Locality: locality(ep.Locality)}
			byLocality[ep.Locality] = loc
		}
		weight := max(ep.Weight, 1)
		lb := &endpoint.LbEndpoint{
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: ep.Address, PortSpecifier: &core.SocketAddress_PortValue{PortValue: ep.Port},
				}}},
			}},
			HealthStatus:        core.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(weight),
		}
		if b.acceptsMTLS(oc, ep) {
			lb.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{transportSocketMatchKey: tlsModeMatch()}}
		}
		loc.LbEndpoints = append(loc.LbEndpoints, lb)
		loc.LoadBalancingWeight = wrapperspb.UInt32(loc.GetLoadBalancingWeight().GetValue() + weight)
	}
	cla := &endpoint.ClusterLoadAssignment{ClusterName: oc.name}
	for _, l := range byLocality {
		cla.Endpoints = append(cla.Endpoints, l)
	}
	slices.SortFunc(cla.Endpoints, func(x, y *endpoint.LocalityLbEndpoints) int {
		return cmp.Or(cmp.Compare(x.Locality.GetRegion(), y.Locality.GetRegion()),
			cmp.Compare(x.Locality.GetZone(), y.Locality.GetZone()), cmp.Compare(x.Locality.GetSubZone(), y.Locality.GetSubZone()))
	})
	return cla
}

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

// locality reads "region/zone/subzone".
func locality(s string) *core.Locality {
	region, rest, _ := strings.Cut(s, "/")
	zone, subzone, _ := strings.Cut(rest, "/")
	return &core.Locality{Region: region, Zone: zone, SubZone: subzone}
}
