package kubesource

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestPodsArePlacedAsIstioPlacesTheirProxies(t *testing.T) {
	onNode := func(p *corev1.Pod, node string) *corev1.Pod { p.Spec.NodeName = node; return p }
	l, idx := cacheIndexers(t,
		newNode("placed", placed("r", "z", "s")),
		newNode("bare", map[string]string{"role": "worker"}),
		onNode(newPod("ns", "on-placed", "sa", "10.0.0.1", nil), "placed"),
		onNode(newPod("ns", "on-bare", "sa", "10.0.0.2", nil), "bare"),
		onNode(newPod("ns", "on-missing", "sa", "10.0.0.3", nil), "missing"),
		onNode(newPod("ns", "own-locality", "sa", "10.0.0.4", map[string]string{model.LegacyLocalityLabel: "pr.pz"}), "placed"),
		onNode(newPod("ns", "own-network", "sa", "10.0.0.5", map[string]string{model.NetworkLabel: "net-pod"}), "placed"),
	)
	r := &reuse{topo: topology{cluster: "c1", network: "net-1"}}
	placement := func(s *model.Snapshot) map[string][2]string {
		out := map[string][2]string{}
		for _, p := range s.Resources().Pods {
			out[p.Name] = [2]string{p.Locality, p.Network}
		}
		return out
	}
	first := buildReusing(l, model.Options{}, r, &touched{})
	want := map[string][2]string{
		"on-placed": {"r/z/s", "net-1"}, "on-bare": {"", "net-1"}, "on-missing": {"", "net-1"},
		"own-locality": {"pr/pz", "net-1"}, "own-network": {"r/z/s", "net-pod"},
	}
	if got := placement(first); !mapsEqual(got, want) {
		t.Fatalf("placement = %v, want %v", got, want)
	}

	// The placed node moves: its pods without a locality label follow,
	// the others keep their models.
	if err := idx["node"].Update(newNode("placed", placed("r2", "z2", ""))); err != nil {
		t.Fatal(err)
	}
	next := buildReusing(l, model.Options{}, r, &touched{nodes: true})
	want["on-placed"], want["own-network"] = [2]string{"r2/z2/", "net-1"}, [2]string{"r2/z2/", "net-pod"}
	if got := placement(next); !mapsEqual(got, want) {
		t.Fatalf("after the node moved, placement = %v, want %v", got, want)
	}
	if next.Version == first.Version {
		t.Error("the node's move did not change the snapshot's version")
	}
	for _, name := range []string{"on-bare", "on-missing", "own-locality"} {
		if first.Pod("ns", name) != next.Pod("ns", name) {
			t.Errorf("pod %s, not moved, was made again", name)
		}
	}
}

func mapsEqual[K, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
