package model_test

import (
	"fmt"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// pods are n running pods of namespace ns, sorted by name.
func pods(n int, ns string) []*model.Pod {
	out := make([]*model.Pod, n)
	for i := range out {
		out[i] = &model.Pod{Meta: model.Meta{Name: fmt.Sprintf("pod-%05d", i), Namespace: ns}, UID: fmt.Sprint(i),
			ServiceAccount: "sa", Labels: map[string]string{"app": fmt.Sprint("app-", i%100)}, IPs: []string{fmt.Sprintf("10.%d.%d.1", i/250, i%250)}}
	}
	return out
}

// BenchmarkDiffRemotePodChange is the Diff of a merged model of 3
// clusters × 3,000 pods after one pod of a remote cluster changed: what
// telling remote pods apart costs each push.
func BenchmarkDiffRemotePodChange(b *testing.B) {
	local, c := pods(3000, "a"), pods(3000, "c")
	before := pods(3000, "b")
	after := append([]*model.Pod(nil), before...)
	moved := *after[1500]
	moved.IPs = []string{"10.99.0.1"}
	after[1500] = &moved
	build := func(v string, b []*model.Pod) *model.Snapshot {
		return model.BuildShared(v, model.Options{}, model.Resources{Pods: local,
			RemotePods: map[string][]*model.Pod{"b": b, "c": c}}, nil)
	}
	old, cur := build("0", before), build("1", after)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if d := model.Diff(old, cur); len(d.Pods) != 1 {
			b.Fatalf("%d pods changed, want 1", len(d.Pods))
		}
	}
}
