package grpcgen

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// endpoints is the load assignment of cluster name (of a subset: the
// endpoints its labels select). Every locality has a
// non-zero weight: gRPC drops localities without one.
func (g *Generator) endpoints(snap *model.Snapshot, p *Proxy, cv clientView, name string) *Resource {
	host, subset, portNum, ok := parseClusterName(name)
	if !ok {
		return nil
	}
	svc, port, ok := lookup(cv, hostPort(host, portNum))
	if !ok {
		return nil
	}
	eps := svc.Endpoints[port.Port]
	key := "eds|" + name
	if net := p.Labels[model.NetworkLabel]; net != "" {
		// Other networks' endpoints are left out: proxyless gRPC is not
		// sent through network gateways (README).
		eps = model.EndpointsInNetwork(eps, net)
		key += "|net:" + net
	}
	if p.NetworkView != nil {
		// A view leaves out the networks it does not name (and keeps
		// the endpoints of none), as Istio's endpoint builder.
		eps = slices.DeleteFunc(slices.Clone(eps), func(ep model.Endpoint) bool {
			return ep.Network != "" && !slices.Contains(p.NetworkView, ep.Network)
		})
		key += "|view:" + strings.Join(p.NetworkView, ",")
	}
	if subset != "" {
		// A subset's endpoints are those its rule, as it applies to the
		// client, selects.
		_, ss := subsetOf(snap, p, host, subset)
		if ss == nil {
			return nil
		}
		eps = subsetEndpoints(eps, ss)
		key += "|" + p.Namespace
		if snap.SelectsClients() {
			key += "|" + labelsKey(p.Labels)
		}
	}
	return &Resource{Name: name, Key: key, Build: func() (proto.Message, error) {
		cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
		index := map[string]*endpoint.LocalityLbEndpoints{}
		for _, ep := range eps {
			loc, ok := index[ep.Locality]
			if !ok {
				loc = &endpoint.LocalityLbEndpoints{Locality: locality(ep.Locality), LoadBalancingWeight: wrapperspb.UInt32(0)}
				index[ep.Locality] = loc
				cla.Endpoints = append(cla.Endpoints, loc)
			}
			w := cmp.Or(ep.Weight, 1)
			loc.LoadBalancingWeight.Value += w
			loc.LbEndpoints = append(loc.LbEndpoints, &endpoint.LbEndpoint{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
					Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Address:       ep.Address,
						PortSpecifier: &core.SocketAddress_PortValue{PortValue: ep.Port},
					}}},
				}},
				HealthStatus:        core.HealthStatus_HEALTHY,
				LoadBalancingWeight: wrapperspb.UInt32(w),
			})
		}
		for _, loc := range cla.Endpoints {
			if loc.LoadBalancingWeight.Value == 0 {
				return nil, fmt.Errorf("endpoints %s: zero locality weight", name)
			}
		}
		return cla, nil
	}}
}

// locality parses Istio's "region/zone/subzone".
func locality(s string) *core.Locality {
	parts := strings.SplitN(s, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return &core.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
}
