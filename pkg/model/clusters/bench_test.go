package clusters

import (
	"fmt"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// discard is a Publisher that keeps nothing.
type discard struct{}

func (discard) Publish(*model.Snapshot) {}

// fleet is n services of cluster, each with 3 endpoints, named svc-<i>.
func fleet(n int, cluster, prefix string) []*model.Service {
	out := make([]*model.Service, n)
	for i := range out {
		out[i] = service(fmt.Sprintf("svc-%d", i), cluster, map[string]uint32{"http": 80},
			fmt.Sprintf("%s.%d.%d.1", prefix, i/250, i%250), fmt.Sprintf("%s.%d.%d.2", prefix, i/250, i%250),
			fmt.Sprintf("%s.%d.%d.3", prefix, i/250, i%250))
	}
	return out
}

// BenchmarkRemoteEndpointChange is one remote EndpointSlice change merged
// into a model of 3 clusters × 1,000 services, each service in all three.
func BenchmarkRemoteEndpointChange(b *testing.B) {
	m, err := New(discard{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	m.Local().Publish(model.Build("a", model.Options{}, model.Resources{Services: fleet(1000, "a", "10"), Pods: []*model.Pod{}}))
	m.Remote("c").Publish(model.Build("c", model.Options{}, model.Resources{Services: fleet(1000, "c", "12")}))
	remote := fleet(1000, "b", "11")
	bp := m.Remote("b")
	bp.Publish(model.Build("b0", model.Options{}, model.Resources{Services: remote}))
	moved := service("svc-500", "b", map[string]uint32{"http": 80}, "11.9.9.9")
	moved.Hostname = remote[500].Hostname // as a source makes it: complete
	changed := [2]*model.Service{remote[500], moved}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		next := append([]*model.Service(nil), remote...)
		next[500] = changed[i%2]
		bp.Publish(model.BuildShared(fmt.Sprint("b", i+1), model.Options{}, model.Resources{Services: next}, nil))
	}
}

// BenchmarkLocalOnlyPublish is a local change passing through the merger
// with no remote cluster: 1,000 services.
func BenchmarkLocalOnlyPublish(b *testing.B) {
	m, err := New(discard{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	local := fleet(1000, "a", "10")
	snaps := [2]*model.Snapshot{
		model.Build("a0", model.Options{}, model.Resources{Services: local, Pods: []*model.Pod{}}),
		model.Build("a1", model.Options{}, model.Resources{Services: local, Pods: []*model.Pod{}}),
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m.Local().Publish(snaps[i%2])
	}
}
