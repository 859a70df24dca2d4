package identity

import (
	"maps"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestWorkloadLabelsCarryTheTopologyIstioAdds(t *testing.T) {
	pod := func(labels map[string]string, locality, network string) *model.Pod {
		return &model.Pod{Meta: model.Meta{Namespace: "ns", Name: "p"}, ServiceAccount: "sa", Labels: labels,
			Locality: locality, Network: network}
	}
	tests := map[string]struct {
		pod      *model.Pod // nil: no registry pod
		claimed  map[string]string
		nodeName string
		network  string // node metadata NETWORK
		locality string // the Envoy node's
		want     map[string]string
	}{
		"a placed pod gets its region, zone, subzone, node and network": {
			pod: pod(map[string]string{"app": "a"}, "r/z/s", "net-1"), nodeName: "n1",
			want: map[string]string{"app": "a", model.RegionLabel: "r", model.ZoneLabel: "z", model.SubzoneLabel: "s",
				model.HostnameLabel: "n1", model.NetworkLabel: "net-1", model.ClusterLabel: "c1"},
		},
		"empty parts of a locality add no label": {
			pod:  pod(map[string]string{"app": "a"}, "/z/", ""),
			want: map[string]string{"app": "a", model.ZoneLabel: "z", model.ClusterLabel: "c1"},
		},
		"the pod's locality wins over its own zone label": {
			pod:  pod(map[string]string{model.ZoneLabel: "mine"}, "r/z", ""),
			want: map[string]string{model.RegionLabel: "r", model.ZoneLabel: "z", model.ClusterLabel: "c1"},
		},
		"an unplaced pod's own zone label is its locality: the Envoy node's is not read": {
			pod: pod(map[string]string{model.ZoneLabel: "mine"}, "", ""), locality: "er/ez",
			want: map[string]string{model.ZoneLabel: "mine", model.ClusterLabel: "c1"},
		},
		"an unplaced pod takes the Envoy node's locality": {
			pod: pod(map[string]string{"app": "a"}, "", ""), locality: "er/ez/es",
			want: map[string]string{"app": "a", model.RegionLabel: "er", model.ZoneLabel: "ez", model.SubzoneLabel: "es", model.ClusterLabel: "c1"},
		},
		"the pod's network label is kept": {
			pod: pod(map[string]string{model.NetworkLabel: "mine"}, "", "mine"), network: "claimed",
			want: map[string]string{model.NetworkLabel: "mine", model.ClusterLabel: "c1"},
		},
		"a pod of no network takes the node's NETWORK": {
			pod: pod(nil, "", ""), network: "claimed",
			want: map[string]string{model.NetworkLabel: "claimed", model.ClusterLabel: "c1"},
		},
		"the cluster's network wins over the node's NETWORK": {
			pod: pod(nil, "", "net-1"), network: "claimed",
			want: map[string]string{model.NetworkLabel: "net-1", model.ClusterLabel: "c1"},
		},
		"without a pod, the claimed locality label is split at slashes only": {
			claimed: map[string]string{model.LegacyLocalityLabel: "r.z"}, locality: "er",
			want: map[string]string{model.LegacyLocalityLabel: "r.z", model.RegionLabel: "r.z", model.ClusterLabel: "c1"},
		},
		"without a pod, an empty locality label gives way to the Envoy node's": {
			claimed: map[string]string{model.LocalityLabel: "", model.LegacyLocalityLabel: "r/z"}, locality: "er",
			want: map[string]string{model.LocalityLabel: "", model.LegacyLocalityLabel: "r/z", model.RegionLabel: "er", model.ClusterLabel: "c1"},
		},
		"without a pod, the node's name and network are added": {
			claimed: map[string]string{"app": "a"}, nodeName: "n1", network: "claimed",
			want: map[string]string{"app": "a", model.HostnameLabel: "n1", model.NetworkLabel: "claimed", model.ClusterLabel: "c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := model.Resources{Pods: []*model.Pod{}}
			w := &Workload{Namespace: "ns", ServiceAccount: "sa", ClusterID: "c1", Labels: tc.claimed,
				NodeName: tc.nodeName, Network: tc.network, Locality: tc.locality}
			if tc.pod != nil {
				res.Pods, w.Pod = []*model.Pod{tc.pod}, "p"
			}
			if got := w.LabelsIn(model.Build("v", model.Options{}, res)); !maps.Equal(got, tc.want) {
				t.Errorf("labels = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWorkloadOfReadsNodeNameAndLocality(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": "ns", "SERVICE_ACCOUNT": "sa", "NODE_NAME": "n1"})
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local", Metadata: md,
		Locality: &core.Locality{Region: "r", SubZone: "s"}}
	meta, err := ParseNode(node)
	if err != nil {
		t.Fatal(err)
	}
	w, err := WorkloadOf(node, meta)
	if err != nil {
		t.Fatal(err)
	}
	if w.NodeName != "n1" || w.Locality != "r" { // Istio's string stops at the first empty part
		t.Errorf("node name %q, locality %q", w.NodeName, w.Locality)
	}
	long, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "ns", "SERVICE_ACCOUNT": "sa", "NODE_NAME": string(make([]byte, 254))})
	if _, err := ParseMetadata(long); err == nil {
		t.Error("a NODE_NAME of 254 bytes was accepted")
	}
}

func TestLabelsThatNeedNothingAreHandedOutWithoutAllocating(t *testing.T) {
	labels := map[string]string{"app": "a", model.ClusterLabel: "c1", model.NetworkLabel: "n", model.ZoneLabel: "z"}
	w := &Workload{Namespace: "ns", ServiceAccount: "sa", Pod: "p", ClusterID: "c1", Locality: "r/z"}
	// Two versions of the pod, alternating: each call is a new pod.
	var snaps [2]*model.Snapshot
	for i := range snaps {
		pod := &model.Pod{Meta: model.Meta{Namespace: "ns", Name: "p"}, ServiceAccount: "sa", Labels: labels, Network: "n"}
		snaps[i] = model.Build("v", model.Options{}, model.Resources{Pods: []*model.Pod{pod}})
	}
	i := 0
	if allocs := testing.AllocsPerRun(100, func() { w.In(snaps[i%2]); i++ }); allocs != 0 {
		t.Errorf("In allocates %.0f times", allocs)
	}
}
