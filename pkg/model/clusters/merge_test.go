package clusters

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

const echoHost = "echo.ns.svc.cluster.local"

// service is ns/name with ports name=port, each with the endpoints at
// addrs of cluster, on the port's number plus 8000.
func service(name, cluster string, ports map[string]uint32, addrs ...string) *model.Service {
	svc := &model.Service{Meta: model.Meta{Name: name, Namespace: "ns"}, Endpoints: map[uint32][]model.Endpoint{}}
	for _, pn := range slices.Sorted(func(yield func(string) bool) {
		for n := range ports {
			if !yield(n) {
				return
			}
		}
	}) {
		p := ports[pn]
		svc.Ports = append(svc.Ports, model.Port{Name: pn, Port: p})
		for _, a := range addrs {
			svc.Endpoints[p] = append(svc.Endpoints[p], model.Endpoint{Address: a, Port: p + 8000, Cluster: cluster,
				Labels: map[string]string{model.ClusterLabel: cluster}})
		}
	}
	return svc
}

func newMerger(t *testing.T, store model.Publisher, log *slog.Logger) *Merger {
	t.Helper()
	m, err := New(store, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func snapshot(version string, svcs ...*model.Service) *model.Snapshot {
	return model.Build(version, model.Options{}, model.Resources{Services: svcs, Pods: []*model.Pod{}})
}

// endpointsOf lists "<address>:<port>@<cluster>" of host's endpoints on port.
func endpointsOf(s *model.Snapshot, host string, port uint32) []string {
	svc := s.Service(host)
	if svc == nil {
		return nil
	}
	var out []string
	for _, ep := range svc.Endpoints[port] {
		out = append(out, ep.Address+":"+itoa(ep.Port)+"@"+ep.Cluster)
	}
	return out
}

func itoa(n uint32) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestNothingIsPublishedBeforeTheLocalCluster(t *testing.T) {
	store := model.NewStore()
	m := newMerger(t, store, nil)
	m.Remote("b").Publish(snapshot("b1", service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1")))
	if store.Current().Version != "" {
		t.Fatalf("published %q before the local cluster's first snapshot", store.Current().Version)
	}
	m.Local().Publish(snapshot("a1"))
	if got := endpointsOf(store.Current(), echoHost, 80); !slices.Equal(got, []string{"10.1.0.1:8080@b"}) {
		t.Fatalf("endpoints %v", got)
	}
}

func TestALocalModelAloneIsPublishedAsItIs(t *testing.T) {
	store := model.NewStore()
	m := newMerger(t, store, nil)
	local := snapshot("a1", service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1"))
	m.Local().Publish(local)
	if store.Current() != local {
		t.Fatal("the local snapshot was not published as it is")
	}
}

func TestServicesMergeByHostname(t *testing.T) {
	tests := map[string]struct {
		local   []*model.Service
		remotes map[string][]*model.Service
		port    uint32
		want    []string
		ports   []uint32 // the merged service's port numbers
	}{
		"every cluster's endpoints join the local Service's": {
			local:   []*model.Service{service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1")},
			remotes: map[string][]*model.Service{"b": {service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1", "10.0.0.1")}},
			port:    80,
			want:    []string{"10.0.0.1:8080@a", "10.0.0.1:8080@b", "10.1.0.1:8080@b"},
			ports:   []uint32{80},
		},
		"a remote port joins the local port of its name, whatever its number": {
			local:   []*model.Service{service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1")},
			remotes: map[string][]*model.Service{"b": {service("echo", "b", map[string]uint32{"http": 81, "grpc": 90}, "10.1.0.1")}},
			port:    80,
			want:    []string{"10.0.0.1:8080@a", "10.1.0.1:8081@b"},
			ports:   []uint32{80},
		},
		"a service only a remote cluster has is that cluster's": {
			remotes: map[string][]*model.Service{"b": {service("echo", "b", map[string]uint32{"grpc": 90}, "10.1.0.1")}},
			port:    90,
			want:    []string{"10.1.0.1:8090@b"},
			ports:   []uint32{90},
		},
		"without a local Service, the remote of the least cluster ID defines it": {
			remotes: map[string][]*model.Service{
				"c": {service("echo", "c", map[string]uint32{"http": 70}, "10.2.0.1")},
				"b": {service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1")},
			},
			port:  80,
			want:  []string{"10.1.0.1:8080@b", "10.2.0.1:8070@c"},
			ports: []uint32{80},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			store := model.NewStore()
			m := newMerger(t, store, nil)
			for _, id := range []string{"c", "b"} {
				if svcs, ok := tc.remotes[id]; ok {
					m.Remote(id).Publish(snapshot(id+"1", svcs...))
				}
			}
			m.Local().Publish(snapshot("a1", tc.local...))
			snap := store.Current()
			if got := endpointsOf(snap, echoHost, tc.port); !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
			var ports []uint32
			for _, p := range snap.Service(echoHost).Ports {
				ports = append(ports, p.Port)
			}
			if !slices.Equal(ports, tc.ports) {
				t.Errorf("ports %v, want %v", ports, tc.ports)
			}
		})
	}
}

func TestARemoteEndpointChangeIsAnEndpointChangeOfItsServiceAlone(t *testing.T) {
	store := model.NewStore()
	m := newMerger(t, store, nil)
	other := service("other", "a", map[string]uint32{"http": 80}, "10.0.0.9")
	remoteOnly := service("far", "b", map[string]uint32{"http": 80}, "10.1.0.9")
	localEcho := service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1")
	m.Local().Publish(snapshot("a1", localEcho, other))
	b := m.Remote("b")
	b.Publish(snapshot("b1", service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1"), remoteOnly))
	before := store.Current()
	b.Publish(snapshot("b2", service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.2"), remoteOnly))
	after := store.Current()
	d := model.Diff(before, after)
	if d.Config || len(d.Services) != 0 || len(d.Pods) != 0 || len(d.Endpoints) != 1 || !d.Endpoints[echoHost] {
		t.Fatalf("diff %+v, want endpoints of %s alone", d, echoHost)
	}
	for _, host := range []string{"other.ns.svc.cluster.local", "far.ns.svc.cluster.local"} {
		if before.Service(host) != after.Service(host) {
			t.Errorf("%s not shared between the snapshots", host)
		}
	}
	if got := endpointsOf(after, echoHost, 80); !slices.Equal(got, []string{"10.0.0.1:8080@a", "10.1.0.2:8080@b"}) {
		t.Errorf("endpoints %v", got)
	}
	// A local change elsewhere keeps the merged service itself.
	m.Local().Publish(snapshot("a2", localEcho, service("other", "a", map[string]uint32{"http": 80}, "10.0.0.8")))
	if store.Current().Service(echoHost) != after.Service(echoHost) {
		t.Error("the merged service was made again though none of its clusters changed it")
	}
}

func TestARemovedClusterLeavesTheModelAndIsNotHeardAgain(t *testing.T) {
	store := model.NewStore()
	m := newMerger(t, store, nil)
	m.Local().Publish(snapshot("a1", service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1")))
	b := m.Remote("b")
	b.Publish(snapshot("b1", service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1"), service("far", "b", map[string]uint32{"http": 80}, "10.1.0.9")))
	if got := endpointsOf(store.Current(), echoHost, 80); len(got) != 2 {
		t.Fatalf("endpoints %v", got)
	}
	m.Remove("b")
	if got := endpointsOf(store.Current(), echoHost, 80); !slices.Equal(got, []string{"10.0.0.1:8080@a"}) {
		t.Fatalf("after removal: endpoints %v", got)
	}
	if store.Current().Service("far.ns.svc.cluster.local") != nil {
		t.Fatal("the removed cluster's own service stayed")
	}
	b.Publish(snapshot("b2", service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.2")))
	if got := endpointsOf(store.Current(), echoHost, 80); !slices.Equal(got, []string{"10.0.0.1:8080@a"}) {
		t.Fatalf("a removed cluster's late snapshot was taken: %v", got)
	}
	if len(m.Clusters()) != 0 {
		t.Fatalf("clusters %v", m.Clusters())
	}
}

func TestAReplacedSourceLeavesNoGap(t *testing.T) {
	store := model.NewStore()
	m := newMerger(t, store, nil)
	m.Local().Publish(snapshot("a1"))
	old := m.Remote("b")
	old.Publish(snapshot("b1", service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1")))
	next := m.Remote("b") // new credentials: a new source, not synced yet
	if got := endpointsOf(store.Current(), echoHost, 80); !slices.Equal(got, []string{"10.1.0.1:8080@b"}) {
		t.Fatalf("endpoints withdrawn before the new source published: %v", got)
	}
	old.Publish(snapshot("b2"))
	if got := endpointsOf(store.Current(), echoHost, 80); !slices.Equal(got, []string{"10.1.0.1:8080@b"}) {
		t.Fatalf("the replaced source was heard: %v", got)
	}
	next.Publish(snapshot("b3", service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.3")))
	if got := endpointsOf(store.Current(), echoHost, 80); !slices.Equal(got, []string{"10.1.0.3:8080@b"}) {
		t.Fatalf("endpoints %v", got)
	}
}
