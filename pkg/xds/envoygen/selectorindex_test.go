package envoygen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestSelectorIndexFindsWhatMatchingEveryServiceFinds: for workloads of
// random labels among services of random selectors (several namespaces,
// selectors of one to three keys, values two keys share, services
// without a selector), the index returns what matching each service's
// selector in turn returns, in the same order.
func TestSelectorIndexFindsWhatMatchingEveryServiceFinds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := []string{"app", "version", "tier", "zone"}
	values := []string{"a", "b", "c", "v1", "v2"}
	randomLabels := func(n int) map[string]string {
		out := map[string]string{}
		for range n {
			out[keys[r.IntN(len(keys))]] = values[r.IntN(len(values))]
		}
		return out
	}
	namespaces := []string{"ns1", "ns2", "ns3"}
	var services []*model.Service
	for i := range 300 {
		ns := namespaces[r.IntN(len(namespaces))]
		svc := &model.Service{Meta: model.Meta{Namespace: ns, Name: fmt.Sprintf("s%d", i)}, Hostname: fmt.Sprintf("s%d.%s.svc.cluster.local", i, ns)}
		if r.IntN(10) > 0 {
			svc.Selector = randomLabels(1 + r.IntN(3))
		}
		services = append(services, svc)
	}
	snap := model.Build("v1", model.Options{}, model.Resources{Services: services})
	x := newSelectorIndex(snap)
	found := 0
	for range 500 {
		ns, labels := namespaces[r.IntN(len(namespaces))], randomLabels(r.IntN(5))
		var want []*model.Service
		for _, svc := range snap.Services() {
			if svc.Namespace == ns && len(svc.Selector) > 0 && model.Matches(svc.Selector, labels) {
				want = append(want, svc)
			}
		}
		got := x.selecting(ns, labels)
		if !slices.Equal(got, want) {
			t.Fatalf("namespace %s, labels %v: got %d services, want %d", ns, labels, len(got), len(want))
		}
		found += len(want)
	}
	if found == 0 {
		t.Fatal("no workload matched any service: the test compares nothing")
	}
}
