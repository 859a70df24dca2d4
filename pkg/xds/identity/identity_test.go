package identity

import (
	"errors"
	"maps"
	"reflect"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestBindCluster(t *testing.T) {
	const own = "primary"
	for name, tc := range map[string]struct {
		claimed string        // node metadata CLUSTER_ID
		caller  *authn.Caller // nil: plaintext port
		want    string
		err     error
	}{
		"a plaintext proxy claiming nothing is istiod's cluster's":               {want: own},
		"a plaintext proxy claiming istiod's cluster is bound to it":             {claimed: own, want: own},
		"a plaintext proxy claiming another cluster is refused":                  {claimed: "remote", want: own, err: ErrClusterMismatch},
		"a certificate caller is istiod's cluster's":                             {caller: &authn.Caller{}, want: own},
		"a token reviewed by istiod's cluster is bound to it":                    {caller: &authn.Caller{ClusterID: own}, claimed: own, want: own},
		"a token reviewed by a remote cluster is bound to it":                    {caller: &authn.Caller{ClusterID: "remote"}, want: "remote"},
		"a remote token claiming that remote cluster is bound to it":             {caller: &authn.Caller{ClusterID: "remote"}, claimed: "remote", want: "remote"},
		"a remote token claiming istiod's cluster is a mismatch":                 {caller: &authn.Caller{ClusterID: "remote"}, claimed: own, want: "remote", err: ErrClusterMismatch},
		"a local token claiming a remote cluster is a mismatch":                  {caller: &authn.Caller{ClusterID: own}, claimed: "remote", want: own, err: ErrClusterMismatch},
		"a local token claiming an alias of istiod's cluster is bound to it":     {caller: &authn.Caller{ClusterID: own}, claimed: "old-primary", want: own},
		"a plaintext proxy claiming an alias of istiod's cluster is bound to it": {claimed: "old-primary", want: own},
		"a remote token claiming an alias of its cluster is bound to it":         {caller: &authn.Caller{ClusterID: "remote"}, claimed: "old-remote", want: "remote"},
		"a remote token claiming an alias of istiod's cluster is a mismatch":     {caller: &authn.Caller{ClusterID: "remote"}, claimed: "old-primary", want: "remote", err: ErrClusterMismatch},
		"a local token claiming an alias of a remote cluster is a mismatch":      {caller: &authn.Caller{ClusterID: own}, claimed: "old-remote", want: own, err: ErrClusterMismatch},
		"a remote token claiming an alias's target by the alias only":            {caller: &authn.Caller{ClusterID: "old-remote"}, claimed: "old-remote", want: "old-remote", err: ErrClusterMismatch},
	} {
		t.Run(name, func(t *testing.T) {
			aliases := authn.ClusterAliases{"old-primary": own, "old-remote": "remote"}
			got, err := BindCluster(own, aliases, &NodeMeta{ClusterID: tc.claimed}, tc.caller)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("BindCluster = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestProxyIDAndWorkloadNamespace(t *testing.T) {
	for id, want := range map[string]string{
		"sidecar~10.0.0.1~echo-1.app~app.svc.cluster.local": "echo-1.app",
		"router~10.0.0.1~gw.istio-system~x":                 "gw.istio-system",
		"grpc-client":                                       "grpc-client",
		"sidecar~10.0.0.1~~app.svc.cluster.local":           "sidecar~10.0.0.1~~app.svc.cluster.local",
	} {
		if got := ProxyID(&core.Node{Id: id}); got != want {
			t.Errorf("ProxyID(%q) = %q, want %q", id, got, want)
		}
	}
	for id, want := range map[string]string{
		"spiffe://cluster.local/ns/app/sa/web":   "app",
		"spiffe://other.td/ns/app/sa/web":        "",
		"spiffe://cluster.local/ns/app":          "",
		"spiffe://cluster.local/ns/app/sa/web/x": "",
		"spiffe://cluster.local/x/app/sa/web":    "",
	} {
		ns, ok := WorkloadNamespace(spiffeid.RequireFromString(id), testTD)
		if ns != want || ok != (want != "") {
			t.Errorf("WorkloadNamespace(%s) = %q, %v; want %q", id, ns, ok, want)
		}
	}
}

func TestWorkloadLabelsNameItsClusterAndAreMadeOncePerPodVersion(t *testing.T) {
	pod := func(app string) *model.Pod {
		return &model.Pod{Meta: model.Meta{Namespace: "ns", Name: "p"}, ServiceAccount: "sa", Labels: map[string]string{"app": app}, IPs: []string{"10.0.0.1"}}
	}
	snapOf := func(p *model.Pod) *model.Snapshot {
		return model.Build("v", model.Options{}, model.Resources{Pods: []*model.Pod{p}})
	}
	w := &Workload{Namespace: "ns", ServiceAccount: "sa", Pod: "p", ClusterID: "c1", Labels: map[string]string{"app": "claimed"}}
	v1 := snapOf(pod("v1"))
	first, ips := w.In(v1)
	if want := map[string]string{"app": "v1", model.ClusterLabel: "c1"}; !maps.Equal(first, want) || len(ips) != 1 {
		t.Fatalf("In = %v %v, want %v and the pod's address", first, ips, want)
	}
	if again := w.LabelsIn(v1); reflect.ValueOf(again).UnsafePointer() != reflect.ValueOf(first).UnsafePointer() {
		t.Error("the same pod's labels were made again")
	}
	if allocs := testing.AllocsPerRun(100, func() { w.In(v1) }); allocs != 0 {
		t.Errorf("In of an unchanged pod allocates %.0f times", allocs)
	}
	if got := w.LabelsIn(snapOf(pod("v2"))); got["app"] != "v2" || got[model.ClusterLabel] != "c1" {
		t.Errorf("after the pod changed, In = %v", got)
	}
	if first["app"] != "v1" {
		t.Errorf("the labels handed out before the change were modified: %v", first)
	}
	// A pod of another service account is not the node's: its own labels.
	other := pod("v3")
	other.ServiceAccount = "other"
	if got := w.LabelsIn(snapOf(other)); got["app"] != "claimed" || got[model.ClusterLabel] != "c1" {
		t.Errorf("with another service account's pod, In = %v", got)
	}
	// A pod that names its cluster already is handed out as it is.
	labelled := pod("v4")
	labelled.Labels[model.ClusterLabel] = "c1"
	if got := w.LabelsIn(snapOf(labelled)); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(labelled.Labels).UnsafePointer() {
		t.Errorf("a pod already labelled with its cluster was copied: %v", got)
	}
}
