package clusters

import (
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// podsSnapshot is a snapshot of pods ns/<name> running as sa, labelled
// app: <app>.
func podsSnapshot(version, sa, app string, names ...string) *model.Snapshot {
	res := model.Resources{Pods: []*model.Pod{}}
	for _, n := range names {
		res.Pods = append(res.Pods, &model.Pod{Meta: model.Meta{Name: n, Namespace: "ns"}, ServiceAccount: sa,
			Labels: map[string]string{"app": app}})
	}
	return model.Build(version, model.Options{}, res)
}

// TestEachClustersPodsAreItsOwn: the merged model holds the local pods
// where they were and each remote cluster's pods under its ID, so that a
// pod is found in its cluster alone; a remote pod change is a pod change,
// and a withdrawn cluster's pods leave the model.
func TestEachClustersPodsAreItsOwn(t *testing.T) {
	store := model.NewStore()
	m := newMerger(t, store, nil)
	m.Local().Publish(podsSnapshot("a1", "local", "a", "app-1", "only-local"))
	m.Remote("b").Publish(podsSnapshot("b1", "remote", "b", "app-1", "only-b"))
	first := store.Current()

	app := func(p *model.Pod) string {
		if p == nil {
			return "none"
		}
		return p.Labels["app"]
	}
	for name, tc := range map[string]struct {
		cluster, pod string
		want         string
		known        bool
	}{
		"b's pod is found in b":                                {"b", "app-1", "b", true},
		"a pod only the local cluster has is not found in b":   {"b", "only-local", "none", true},
		"b's own pod is found in b":                            {"b", "only-b", "b", true},
		"a cluster not registered has no registry":             {"c", "app-1", "none", false},
		"the local cluster's ID is no remote registry":         {"a", "app-1", "none", false},
		"a pod of b's is not found in the local registry ever": {"", "only-b", "none", false},
	} {
		t.Run(name, func(t *testing.T) {
			pod, known := first.RemotePod(tc.cluster, "ns", tc.pod)
			if got := app(pod); got != tc.want || known != tc.known {
				t.Fatalf("RemotePod(%s, %s) = %s, %v; want %s, %v", tc.cluster, tc.pod, got, known, tc.want, tc.known)
			}
		})
	}
	if got := app(first.Pod("ns", "app-1")); got != "a" {
		t.Fatalf("the local registry's app-1 is %s's", got)
	}
	if first.Pod("ns", "only-b") != nil {
		t.Fatal("a remote pod is in the local registry")
	}

	m.Remote("b").Publish(podsSnapshot("b2", "remote", "b2", "app-1", "only-b"))
	second := store.Current()
	c := model.Diff(first, second)
	if c.Config || !c.Pods[model.Meta{Name: "app-1", Namespace: "ns"}] || !c.Pods[model.Meta{Name: "only-b", Namespace: "ns"}] || len(c.Pods) != 2 {
		t.Fatalf("a remote pod change is %+v, want the pods that changed", c)
	}
	if pod, _ := second.RemotePod("b", "ns", "app-1"); app(pod) != "b2" {
		t.Fatalf("b's app-1 is %s after its change", app(pod))
	}

	m.Local().Publish(podsSnapshot("a2", "local", "a", "app-1", "only-local", "new-local"))
	if c := model.Diff(second, store.Current()); len(c.Pods) != 1 || !c.Pods[model.Meta{Name: "new-local", Namespace: "ns"}] {
		t.Fatalf("a local pod added is %+v: b's pods, shared, did not change", c.Pods)
	}

	before := store.Current()
	m.Remove("b")
	after := store.Current()
	if after.HasRemotePods("b") {
		t.Fatal("b's pods stay after b was withdrawn")
	}
	if c := model.Diff(before, after); !c.Pods[model.Meta{Name: "only-b", Namespace: "ns"}] {
		t.Fatalf("withdrawing b is %+v, want b's pods changed", c)
	}
}
