package interop

import (
	"slices"
	"sync/atomic"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestFleetWireDecodesEnvoyResources checks the fleet's wire decoder
// against responses marshalled from go-control-plane's own types.
func TestFleetWireDecodesEnvoyResources(t *testing.T) {
	anyOf := func(m proto.Message) *anypb.Any {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	decode := func(t *testing.T, resp *discovery.DeltaDiscoveryResponse, needle string) *fleetResponse {
		raw, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		goals := &atomic.Pointer[fleetGoal]{}
		goals.Store(&fleetGoal{})
		if needle != "" {
			goals.Store(&fleetGoal{needle: []byte(needle)})
		}
		r := &fleetResponse{names: &fleetNames{}, keepAddrs: true, goals: goals}
		if err := r.decode(raw); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if r.typeURL != resp.TypeUrl || r.nonce != resp.Nonce || !slices.Equal(r.removed, resp.RemovedResources) {
			t.Errorf("decoded type %q nonce %q removed %v, want %q %q %v", r.typeURL, r.nonce, r.removed,
				resp.TypeUrl, resp.Nonce, resp.RemovedResources)
		}
		return r
	}
	socket := func(ip string, port uint32) *endpoint.LbEndpoint {
		return &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: ip, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}}}}
	}

	t.Run("clusters give their EDS names; others none", func(t *testing.T) {
		eds := &cluster.Cluster{Name: "outbound|80||a.ns.svc.cluster.local",
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
			EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{ServiceName: "outbound|80||a.ns.svc.cluster.local"}}
		named := &cluster.Cluster{Name: "c", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS}}
		static := &cluster.Cluster{Name: "BlackHoleCluster", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}}
		r := decode(t, &discovery.DeltaDiscoveryResponse{TypeUrl: fleetCDS, Nonce: "n1", RemovedResources: []string{"gone"},
			Resources: []*discovery.Resource{{Name: eds.Name, Resource: anyOf(eds)}, {Name: "c", Resource: anyOf(named)},
				{Name: static.Name, Resource: anyOf(static)}}}, "")
		want := []fleetCluster{{eds.Name, eds.Name}, {"c", "c"}, {"BlackHoleCluster", ""}}
		if !slices.Equal(r.clusters, want) {
			t.Errorf("clusters %v, want %v", r.clusters, want)
		}
	})

	t.Run("load assignments give a fingerprint of their addresses in any order", func(t *testing.T) {
		cla := &endpoint.ClusterLoadAssignment{ClusterName: "x", Endpoints: []*endpoint.LocalityLbEndpoints{
			{LbEndpoints: []*endpoint.LbEndpoint{socket("10.64.0.2", 8080)}},
			{LbEndpoints: []*endpoint.LbEndpoint{socket("10.64.0.1", 8080)}},
		}}
		r := decode(t, &discovery.DeltaDiscoveryResponse{TypeUrl: fleetEDS, Nonce: "n2",
			Resources: []*discovery.Resource{{Name: "x", Resource: anyOf(cla)}}}, "")
		if len(r.loads) != 1 || r.loads[0].name != "x" {
			t.Fatalf("loads %v", r.loads)
		}
		if got, want := r.loads[0].fp, endpointsFingerprint([]string{"10.64.0.1:8080", "10.64.0.2:8080"}); got != want {
			t.Errorf("fingerprint %x, want %x", got, want)
		}
		if other := endpointsFingerprint([]string{"10.64.0.1:8080", "10.64.0.3:8080"}); r.loads[0].fp == other {
			t.Error("another endpoint set has the same fingerprint")
		}
		if !slices.Equal(r.loads[0].addrs, []string{"10.64.0.2:8080", "10.64.0.1:8080"}) {
			t.Errorf("addresses %v", r.loads[0].addrs)
		}
	})

	t.Run("listeners give the route names their connection managers ask of RDS", func(t *testing.T) {
		rds := anyOf(&hcm.HttpConnectionManager{RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: "80"}}})
		inline := anyOf(&hcm.HttpConnectionManager{RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{
			RouteConfig: &route.RouteConfiguration{Name: "inline"}}})
		filter := func(a *anypb.Any) *listener.Filter {
			return &listener.Filter{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}
		}
		l := &listener.Listener{Name: "0.0.0.0_80",
			FilterChains:       []*listener.FilterChain{{Filters: []*listener.Filter{filter(inline)}}, {Filters: []*listener.Filter{filter(rds)}}},
			DefaultFilterChain: &listener.FilterChain{Filters: []*listener.Filter{filter(anyOf(&hcm.HttpConnectionManager{RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: "default"}}}))}}}
		r := decode(t, &discovery.DeltaDiscoveryResponse{TypeUrl: fleetLDS, Nonce: "n3",
			Resources: []*discovery.Resource{{Name: l.Name, Resource: anyOf(l)}}}, "inline")
		if len(r.listeners) != 1 || !slices.Equal(r.listeners[0].routes, []string{"80", "default"}) {
			t.Errorf("listeners %v, want 0.0.0.0_80 asking for [80 default]", r.listeners)
		}
		if !r.needleIn {
			t.Error("the needle in an inline route configuration was not found")
		}
	})
}
