package xds

import (
	"context"
	"fmt"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

type deltaStream = discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient

func (h *harness) deltaStream(id string) deltaStream {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	h.t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-id", id)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(h.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func recvDelta(t *testing.T, st deltaStream) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	ch := make(chan *discovery.DeltaDiscoveryResponse, 1)
	go func() {
		r, err := st.Recv()
		if err != nil {
			t.Errorf("recv: %v", err)
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		if r == nil {
			t.FailNow()
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response")
	}
	return nil
}

func TestDelta(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	st := h.deltaStream(clientID)
	send := func(r *discovery.DeltaDiscoveryRequest) {
		t.Helper()
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	// probe subscribes to a cluster name and expects the next response to
	// be CDS: nothing else was queued before it.
	probes := 0
	probe := func() {
		t.Helper()
		probes++
		send(&discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.ClusterType, ResourceNamesSubscribe: []string{echoCluster}})
		if probes == 1 {
			if r := recvDelta(t, st); r.GetTypeUrl() != grpcgen.ClusterType {
				t.Fatalf("got an unexpected %s response", r.GetTypeUrl())
			}
		}
	}

	send(&discovery.DeltaDiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.EndpointType, ResourceNamesSubscribe: []string{echoCluster}})
	first := recvDelta(t, st)
	if len(first.GetResources()) != 1 || first.GetResources()[0].GetName() != echoCluster {
		t.Fatalf("first response: %v", first)
	}
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResponseNonce: first.GetNonce()})

	// A change sends only what changed.
	h.store.Publish(modeltest.Load(t, baseManifests+`---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-2, namespace: app}
spec: {address: 10.0.0.3, labels: {app: echo}, serviceAccount: echo}
`))
	second := recvDelta(t, st)
	if second.GetTypeUrl() != grpcgen.EndpointType || len(second.GetResources()) != 1 ||
		second.GetResources()[0].GetVersion() == first.GetResources()[0].GetVersion() {
		t.Fatalf("push: %v", second)
	}

	// A NACK is recorded and not answered with the same resource again.
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResponseNonce: second.GetNonce(), ErrorDetail: &status.Status{Message: "bad endpoints"}})
	probe()
	if ps := h.srv.Proxies(); len(ps) != 1 || ps[0].Rejected[grpcgen.EndpointType] != "bad endpoints" {
		t.Fatalf("proxy status after NACK: %+v", ps)
	}

	// Unsubscribing sends nothing; the resource is no longer pushed.
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResourceNamesUnsubscribe: []string{echoCluster}})
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.RouteType, ResourceNamesSubscribe: []string{echoListener}})
	if r := recvDelta(t, st); r.GetTypeUrl() != grpcgen.RouteType { // the unsubscription is processed
		t.Fatalf("got an unexpected %s response", r.GetTypeUrl())
	}
	next := modeltest.Load(t, baseManifests)
	h.store.Publish(next)
	h.srv.push(next, time.Time{}) // synchronously: a response it queues comes before the next one
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNamesSubscribe: []string{echoListener}})
	if r := recvDelta(t, st); r.GetTypeUrl() != grpcgen.ListenerType {
		t.Fatalf("an unsubscribed %s resource was pushed: %v", r.GetTypeUrl(), r)
	}
}

// TestDeltaAndStateOfTheWorldStreamsCoexist checks that streams of both
// kinds, whose servers number them independently, keep separate state.
func TestDeltaAndStateOfTheWorldStreamsCoexist(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	sotw := h.stream(clientID)
	if err := sotw.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	recv(t, sotw)
	delta := h.deltaStream(clientID)
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNamesSubscribe: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	if r := recvDelta(t, delta); len(r.GetResources()) != 1 {
		t.Fatalf("delta response: %v", r)
	}
	if n := len(h.srv.Proxies()); n != 2 {
		t.Fatalf("%d proxies, want 2", n)
	}
}

// TestDeltaHoldingsAreSharedAndFollowTheClient: sidecars of one scope hold
// the versions of one response, and what each holds still follows its own
// stream: a resource it unsubscribed from is sent again when it
// subscribes again, and one gone from the model is reported removed.
func TestDeltaHoldingsAreSharedAndFollowTheClient(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
	streams := []deltaStream{h.deltaStream(clientID), h.deltaStream(clientID)}
	for i, st := range streams {
		node := envoyNode("app", "client", fmt.Sprintf("10.0.0.%d", 9+i))
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		r := recvDelta(t, st)
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{echoCluster}}); err != nil {
			t.Fatal(err)
		}
		if r := recvDelta(t, st); len(r.GetResources()) != 1 {
			t.Fatalf("stream %d: endpoints %v", i, r.GetResources())
		}
	}
	h.srv.mu.Lock()
	var held []*deltaHeld
	for _, p := range h.srv.streams {
		p.mu.Lock()
		held = append(held, p.delta[resource.ClusterType].held)
		p.mu.Unlock()
	}
	h.srv.mu.Unlock()
	if len(held) != 2 || held[0] == nil || held[1] == nil || reflect.ValueOf(held[0].versions).UnsafePointer() != reflect.ValueOf(held[1].versions).UnsafePointer() {
		t.Fatalf("two sidecars of one scope do not share the clusters they hold: %v", held)
	}

	st := streams[0]
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesUnsubscribe: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}
	if r := recvDelta(t, st); r.GetTypeUrl() != resource.EndpointType || len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != echoCluster {
		t.Fatalf("subscribed again, got %v", r)
	}

	h.store.Publish(modeltest.Load(t, baseManifests)) // web is gone
	for {
		r := recvDelta(t, st)
		if r.GetTypeUrl() != resource.ClusterType {
			continue
		}
		if !slices.ContainsFunc(r.GetRemovedResources(), func(n string) bool { return strings.HasSuffix(n, "|web.app.svc.cluster.local") }) {
			t.Fatalf("web's clusters are not reported removed: %v", r.GetRemovedResources())
		}
		break
	}
}

// TestDeltaHoldingsOfEqualContentAreShared connects sidecars of two
// scopes (other workloads) whose clusters are equal: they hold one set of
// versions between them.
func TestDeltaHoldingsOfEqualContentAreShared(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
	for _, sa := range []string{"client", "other"} {
		st := h.deltaStream("spiffe://cluster.local/ns/app/sa/" + sa)
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: envoyNode("app", sa, "10.0.0.9"), TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		recvDelta(t, st)
	}
	h.srv.mu.Lock()
	var held []*deltaHeld
	scopes := map[string]bool{}
	for _, p := range h.srv.streams {
		p.mu.Lock()
		held = append(held, p.delta[resource.ClusterType].held)
		scopes[p.scopeKey] = true
		p.mu.Unlock()
	}
	h.srv.mu.Unlock()
	if len(scopes) != 2 {
		t.Fatalf("%d scopes, want the two workloads'", len(scopes))
	}
	if len(held) != 2 || held[0] == nil || held[1] == nil || held[0].base != held[1].base {
		t.Fatalf("two sidecars holding equal clusters hold two copies: %v", held)
	}
}
