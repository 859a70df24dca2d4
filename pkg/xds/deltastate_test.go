package xds

import (
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// TestDeltaSubscriptionRules follows the examples of Envoy's xDS protocol
// ("how the client specifies what resources to return") request by request.
func TestDeltaSubscriptionRules(t *testing.T) {
	type req struct{ sub, unsub []string }
	for name, tc := range map[string]struct {
		initial      map[string]string
		reqs         []req
		wantNames    []string
		wantWildcard bool
		wantRecorded map[string]string
	}{
		"an empty first request is a wildcard, and so are empty requests after it": {
			reqs:         []req{{}, {}},
			wantWildcard: true,
		},
		"naming a resource after a legacy wildcard keeps the wildcard": {
			reqs:         []req{{}, {sub: []string{"a"}}},
			wantNames:    []string{"a"},
			wantWildcard: true,
		},
		"a first request naming resources is not a wildcard": {
			reqs:      []req{{sub: []string{"b", "a", "b"}}},
			wantNames: []string{"a", "b"},
		},
		"an explicit * is a wildcard beside names": {
			reqs:         []req{{sub: []string{"a", "*"}}},
			wantNames:    []string{"a"},
			wantWildcard: true,
		},
		"unsubscribing * ends the wildcard and keeps the names": {
			reqs:      []req{{}, {sub: []string{"a"}}, {unsub: []string{"*"}}},
			wantNames: []string{"a"},
		},
		"an empty request after the legacy rule ended subscribes to nothing more": {
			reqs:      []req{{sub: []string{"a"}}, {}},
			wantNames: []string{"a"},
		},
		"unsubscribing a name": {
			reqs:      []req{{sub: []string{"a", "b"}}, {unsub: []string{"a", "never-subscribed"}}},
			wantNames: []string{"b"},
		},
		"subscribing and unsubscribing a name in one request unsubscribes it": {
			reqs: []req{{sub: []string{"a"}, unsub: []string{"a"}}},
		},
		"a name unsubscribed under a wildcard is sent again": {
			reqs:         []req{{sub: []string{"*", "a"}}, {unsub: []string{"a"}}},
			wantWildcard: true,
			wantRecorded: map[string]string{"a": ""},
		},
		"announced versions are kept, less the names unsubscribed": {
			initial:      map[string]string{"a": "v1", "b": "v2"},
			reqs:         []req{{sub: []string{"a", "b"}}, {unsub: []string{"b"}}},
			wantNames:    []string{"a"},
			wantRecorded: map[string]string{"a": "v1"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var sets nameSets
			first := &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: tc.reqs[0].sub, InitialResourceVersions: tc.initial}
			d := newDeltaState(first)
			for _, r := range tc.reqs {
				if err := d.update(&sets, r.sub, r.unsub); err != nil {
					t.Fatal(err)
				}
			}
			var names []string
			if d.names != nil {
				names = d.names.names
			}
			if !slices.Equal(names, tc.wantNames) || d.wildcard != tc.wantWildcard {
				t.Errorf("names %q wildcard %t, want %q %t", names, d.wildcard, tc.wantNames, tc.wantWildcard)
			}
			if len(d.recorded)+len(tc.wantRecorded) > 0 && !maps.Equal(d.recorded, tc.wantRecorded) {
				t.Errorf("recorded %v, want %v", d.recorded, tc.wantRecorded)
			}
		})
	}
}

// TestNameSetsAreSharedAndCollected: streams subscribing to the same names
// hold one set, whatever the order they named them in, and a set no
// stream holds any longer is forgotten.
func TestNameSetsAreSharedAndCollected(t *testing.T) {
	var sets nameSets
	a := sets.update(nil, []string{"x", "y", "z"}, nil)
	b := sets.update(sets.update(nil, []string{"z"}, nil), []string{"y", "x"}, nil)
	if a != b {
		t.Fatal("two subscriptions to the same names hold two sets")
	}
	if c := sets.update(a, nil, []string{"q"}); c != a {
		t.Fatal("unsubscribing a name not held made a new set")
	}
	if sets.update(a, nil, []string{"x", "y", "z"}) != nil {
		t.Fatal("unsubscribing every name left a set")
	}
	if !a.contains("y") || a.contains("q") {
		t.Fatalf("contains: %v", a.names)
	}
	a, b = nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for sets.len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sets still interned after their holders are gone", sets.len())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if d := sets.update(nil, []string{"x"}, nil); d == nil || d.names[0] != "x" {
		t.Fatal("a set interned again after its key was forgotten")
	}
}

// TestDeltaStreamsShareSubscriptions: two sidecars subscribing to the same
// endpoints hold one name set.
func TestDeltaStreamsShareSubscriptions(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	for i := range 2 {
		st := h.deltaStream(clientID)
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{echoCluster}}); err != nil {
			t.Fatal(err)
		}
		if r := recvDelta(t, st); len(r.GetResources()) != 1 {
			t.Fatalf("stream %d: endpoints %v", i, r.GetResources())
		}
	}
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	var sets []*nameSet
	for _, p := range h.srv.streams {
		p.mu.Lock()
		sets = append(sets, p.delta[resource.EndpointType].names)
		p.mu.Unlock()
	}
	if len(sets) != 2 || sets[0] == nil || sets[0] != sets[1] {
		t.Fatalf("two sidecars subscribing to the same endpoints hold %v", sets)
	}
}

// TestDeltaReconnectAnnouncingWhatItHolds: a client that reconnects
// announcing the versions it holds is sent only what changed, and told of
// what is gone.
func TestDeltaReconnectAnnouncingWhatItHolds(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	node := envoyNode("app", "client", "10.0.0.9")
	st := h.deltaStream(clientID)
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, r := range recvDelta(t, st).GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	if len(held) < 2 {
		t.Fatalf("clusters: %v", held)
	}
	var stale string
	for name := range held {
		if name != "BlackHoleCluster" && name != "PassthroughCluster" && name != "InboundPassthroughCluster" {
			stale = name
			break
		}
	}
	held[stale] = "an older version"
	held["outbound|1|gone.app.svc.cluster.local"] = "v1"

	again := h.deltaStream(clientID)
	if err := again.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, InitialResourceVersions: held}); err != nil {
		t.Fatal(err)
	}
	r := recvDelta(t, again)
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != stale {
		t.Errorf("resent %v, want only %s", r.GetResources(), stale)
	}
	if !slices.Equal(r.GetRemovedResources(), []string{"outbound|1|gone.app.svc.cluster.local"}) {
		t.Errorf("removed %v", r.GetRemovedResources())
	}
}
