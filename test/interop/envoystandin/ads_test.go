package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// scriptedADS is a Delta ADS server that runs script on each stream.
type scriptedADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	script  func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer, stream int) error
	done    chan error
	streams atomic.Int32
}

// errCloseStream ends a stream for the client to reconnect.
var errCloseStream = errors.New("close the stream")

func (f *scriptedADS) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	err := f.script(s, int(f.streams.Add(1)))
	if errors.Is(err, errCloseStream) {
		return nil
	}
	f.done <- err
	<-s.Context().Done()
	return nil
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// httpListener is a listener whose HTTP connection manager takes its
// routes from RDS name rds, or, when rds is "", inline to cluster.
func httpListener(t *testing.T, name string, port uint32, rds, cluster string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{StatPrefix: name,
		HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}}}
	if rds != "" {
		hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: rds,
			ConfigSource: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}}
	} else {
		hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: routeTo("inline", cluster)}
	}
	return &listenerv3.Listener{Name: name,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)}}}}}}
}

func routeTo(name, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}}}}}}}
}

func edsCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: name,
			EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}}
}

// exchange is the server side of a stream: it expects requests and sends
// responses.
type exchange struct {
	t      *testing.T
	s      discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	stream int // 1 for the first stream
	nonce  int
}

func (x *exchange) expect(typeURL, what string) (*discoveryv3.DeltaDiscoveryRequest, error) {
	r, err := x.s.Recv()
	if err != nil {
		return nil, err
	}
	got := "subscribe"
	switch {
	case r.GetErrorDetail() != nil:
		got = "nack"
	case r.GetResponseNonce() != "":
		got = "ack"
	}
	if r.GetTypeUrl() != typeURL || got != what {
		return r, fmt.Errorf("got %s %s %v, want %s %s", shortType(r.GetTypeUrl()), got, r.GetResourceNamesSubscribe(), shortType(typeURL), what)
	}
	return r, nil
}

func (x *exchange) send(typeURL string, msgs ...proto.Message) error {
	x.nonce++
	resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: fmt.Sprint(x.nonce), SystemVersionInfo: "v1"}
	for _, m := range msgs {
		var name string
		switch r := m.(type) {
		case *endpointv3.ClusterLoadAssignment:
			name = r.GetClusterName()
		case interface{ GetName() string }:
			name = r.GetName()
		}
		resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: name, Version: "1", Resource: mustAny(x.t, m)})
	}
	return x.s.Send(resp)
}

// runStandinADS runs the stand-in's ADS client against script until it
// returns, and gives the state then.
func runStandinADS(t *testing.T, script func(x *exchange) error) State {
	sock := filepath.Join(t.TempDir(), "xds")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &scriptedADS{done: make(chan error, 1)}
	fake.script = func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer, stream int) error {
		return script(&exchange{t: t, s: s, stream: stream})
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, fake)
	go srv.Serve(l)
	defer srv.Stop()

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	boot := &bootInfo{node: &corev3.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}, xdsPath: sock,
		pipes: map[string]string{}, staticClusters: map[string]bool{}, staticListeners: map[string]string{}, staticSecrets: map[string]bool{}}
	st := newStore(filepath.Join(t.TempDir(), "state.json"), log)
	st.setStart(nil, boot)
	sds := newSDS(boot, st, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- newADS(boot, st, sds, log).run(ctx) }()
	select {
	case err := <-fake.done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Error("script did not finish")
	}
	time.Sleep(100 * time.Millisecond) // let the client record what it sent last
	cancel()
	<-done
	var out State
	st.read(func(s *State) { out = *s })
	return out
}

// warmAll plays Istio's side of a first stream: one EDS cluster, its
// endpoints, one listener with an RDS route, the route.
func warmAll(x *exchange) error {
	steps := []func() error{
		func() error { _, err := x.expect(typeCDS, "subscribe"); return err },
		func() error { return x.send(typeCDS, edsCluster("c1")) },
		func() error { _, err := x.expect(typeCDS, "ack"); return err },
		func() error {
			r, err := x.expect(typeEDS, "subscribe")
			if err == nil && strings.Join(r.GetResourceNamesSubscribe(), ",") != "c1" {
				err = fmt.Errorf("EDS subscribe %v, want [c1]", r.GetResourceNamesSubscribe())
			}
			return err
		},
		func() error { return x.send(typeEDS, &endpointv3.ClusterLoadAssignment{ClusterName: "c1"}) },
		func() error { _, err := x.expect(typeEDS, "ack"); return err },
		func() error { _, err := x.expect(typeLDS, "subscribe"); return err },
		func() error { return x.send(typeLDS, httpListener(x.t, "l1", 80, "r1", "")) },
		func() error { _, err := x.expect(typeLDS, "ack"); return err },
		func() error { _, err := x.expect(typeRDS, "subscribe"); return err },
		func() error { return x.send(typeRDS, routeTo("r1", "c1")) },
		func() error { _, err := x.expect(typeRDS, "ack"); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func TestADSWarmsInEnvoysOrderAndGoesLive(t *testing.T) {
	st := runStandinADS(t, warmAll)
	if st.Server.State != "LIVE" || st.Stats["server.state"] != 0 || st.Stats["listener_manager.workers_started"] != 1 {
		t.Errorf("server %+v, stats %v; want LIVE", st.Server, st.Stats)
	}
	if len(st.Warming) != 0 || len(st.Warnings) != 0 {
		t.Errorf("warming %v, warnings %v", st.Warming, st.Warnings)
	}
}

func TestADSRejectsAListenerWhoseInlineRouteNamesAnUnknownCluster(t *testing.T) {
	var nack string
	st := runStandinADS(t, func(x *exchange) error {
		if _, err := x.expect(typeCDS, "subscribe"); err != nil {
			return err
		}
		if err := x.send(typeCDS); err != nil { // no clusters
			return err
		}
		if _, err := x.expect(typeCDS, "ack"); err != nil {
			return err
		}
		if _, err := x.expect(typeLDS, "subscribe"); err != nil {
			return err
		}
		if err := x.send(typeLDS, httpListener(x.t, "l1", 80, "", "nope")); err != nil {
			return err
		}
		r, err := x.expect(typeLDS, "nack")
		nack = r.GetErrorDetail().GetMessage()
		return err
	})
	if !strings.Contains(nack, "route: unknown cluster 'nope'") {
		t.Errorf("NACK detail %q", nack)
	}
	if lds := st.XDS["LDS"]; lds == nil || lds.NACKs != 1 || lds.ACKs != 0 || st.Stats["listener_manager.lds.update_rejected"] != 1 {
		t.Errorf("LDS %+v, stats %v", lds, st.Stats)
	}
	if len(st.Resources["LDS"]) != 0 {
		t.Errorf("the rejected listener is held: %v", st.Resources["LDS"])
	}
}

func TestADSKeepsAClusterWarmingUntilItsEndpointsArrive(t *testing.T) {
	st := runStandinADS(t, func(x *exchange) error {
		if _, err := x.expect(typeCDS, "subscribe"); err != nil {
			return err
		}
		if err := x.send(typeCDS, edsCluster("c1")); err != nil {
			return err
		}
		if _, err := x.expect(typeCDS, "ack"); err != nil {
			return err
		}
		_, err := x.expect(typeEDS, "subscribe")
		return err // and no answer: c1 warms, LDS is not asked for
	})
	if w := st.Warming["cluster c1"]; len(w) != 1 || w[0] != "EDS c1" {
		t.Errorf("warming %v, want cluster c1 waiting for EDS c1", st.Warming)
	}
	if lds := st.XDS["LDS"]; lds != nil && lds.Requested {
		t.Errorf("LDS asked for while a cluster warms")
	}
}

func TestADSReconnectsAskingForWhatItHolds(t *testing.T) {
	st := runStandinADS(t, func(x *exchange) error {
		if x.stream == 1 {
			if err := warmAll(x); err != nil {
				return err
			}
			return errCloseStream
		}
		// The new stream asks again for every type, in order, with the
		// versions held, and the names of EDS and RDS.
		for _, want := range []struct {
			typeURL string
			names   string
			held    string
		}{{typeCDS, "", "c1"}, {typeEDS, "c1", "c1"}, {typeLDS, "", "l1"}, {typeRDS, "r1", "r1"}} {
			r, err := x.expect(want.typeURL, "subscribe")
			if err != nil {
				return err
			}
			if x.nonce == 0 && r.GetNode().GetId() == "" {
				return errors.New("no node on the new stream's first request")
			}
			var held []string
			for name := range r.GetInitialResourceVersions() {
				held = append(held, name)
			}
			if got := strings.Join(r.GetResourceNamesSubscribe(), ","); got != want.names || strings.Join(held, ",") != want.held {
				return fmt.Errorf("%s on the new stream: subscribe [%s], initial versions %v; want [%s], [%s]",
					shortType(want.typeURL), got, r.GetInitialResourceVersions(), want.names, want.held)
			}
			x.nonce++ // only the first request carries the node
		}
		return nil
	})
	if st.ADSStreams != 2 || st.Server.State != "LIVE" {
		t.Errorf("%d streams, server %s; want 2, LIVE", st.ADSStreams, st.Server.State)
	}
}
