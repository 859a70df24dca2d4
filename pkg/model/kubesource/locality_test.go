package kubesource

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// placed are the labels of a node placed in region r, zone z, subzone s.
func placed(r, z, s string) map[string]string {
	return map[string]string{corev1.LabelTopologyRegion: r, corev1.LabelTopologyZone: z, model.SubzoneLabel: s}
}

func TestEndpointLocality(t *testing.T) {
	beta := map[string]string{corev1.LabelFailureDomainBetaRegion: "old-r", corev1.LabelFailureDomainBetaZone: "old-z"}
	both := placed("r", "z", "")
	both[corev1.LabelFailureDomainBetaRegion], both[corev1.LabelFailureDomainBetaZone] = "old-r", "old-z"
	emptyGA := map[string]string{corev1.LabelTopologyRegion: "", corev1.LabelFailureDomainBetaRegion: "old-r"}
	tests := map[string]struct {
		podLabels    map[string]string // besides app and tlsMode
		podNode      string            // the pod's spec.nodeName
		endpointNode string            // the endpoint's nodeName
		zone         string            // the endpoint's zone
		nodes        []*corev1.Node
		noPod        bool // the endpoint names no pod and no pod has its IP
		want         string
	}{
		"the node's region, zone and subzone are joined by slashes": {
			podNode: "n", nodes: []*corev1.Node{newNode("n", placed("r", "z", "s"))}, want: "r/z/s",
		},
		"a node without a subzone leaves the last part empty": {
			podNode: "n", nodes: []*corev1.Node{newNode("n", placed("r", "z", ""))}, want: "r/z/",
		},
		"a node with only a zone leaves region and subzone empty": {
			podNode: "n", nodes: []*corev1.Node{newNode("n", map[string]string{corev1.LabelTopologyZone: "z"})}, want: "/z/",
		},
		"a node with only a subzone leaves region and zone empty": {
			podNode: "n", nodes: []*corev1.Node{newNode("n", map[string]string{model.SubzoneLabel: "s"})}, want: "//s",
		},
		"the deprecated beta labels place a node without the GA ones": {
			podNode: "n", nodes: []*corev1.Node{newNode("n", beta)}, want: "old-r/old-z/",
		},
		"the GA labels win over the beta ones": {
			podNode: "n", nodes: []*corev1.Node{newNode("n", both)}, want: "r/z/",
		},
		"an empty GA label gives way to its beta twin": {
			podNode: "n", nodes: []*corev1.Node{newNode("n", emptyGA)}, want: "old-r//",
		},
		"a known node without locality labels places the pod nowhere, whatever the endpoint's zone": {
			podNode: "n", zone: "zone-a", nodes: []*corev1.Node{newNode("n", map[string]string{"role": "worker"})},
		},
		"the pod's topology.istio.io/locality label wins over its node": {
			podLabels: map[string]string{model.LocalityLabel: "pr/pz/ps"}, podNode: "n",
			nodes: []*corev1.Node{newNode("n", placed("r", "z", "s"))}, want: "pr/pz/ps",
		},
		"the pod's istio-locality label wins over its node, dots read as slashes": {
			podLabels: map[string]string{model.LegacyLocalityLabel: "pr.pz"}, podNode: "n",
			nodes: []*corev1.Node{newNode("n", placed("r", "z", "s"))}, want: "pr/pz",
		},
		"topology.istio.io/locality wins over istio-locality": {
			podLabels: map[string]string{model.LocalityLabel: "new.zone", model.LegacyLocalityLabel: "old.zone"}, want: "new/zone",
		},
		"an empty topology.istio.io/locality label leaves the node to place the pod": {
			podLabels: map[string]string{model.LocalityLabel: "", model.LegacyLocalityLabel: "old.zone"}, podNode: "n",
			nodes: []*corev1.Node{newNode("n", placed("r", "z", "s"))}, want: "r/z/s",
		},
		"the endpoint's nodeName wins over the pod's": {
			podNode: "n1", endpointNode: "n2",
			nodes: []*corev1.Node{newNode("n1", placed("r1", "z1", "")), newNode("n2", placed("r2", "z2", ""))}, want: "r2/z2/",
		},
		"a node not in the cache leaves the endpoint's zone": {podNode: "gone", zone: "zone-a", want: "/zone-a"},
		"a pod on no node leaves the endpoint's zone":        {zone: "zone-a", want: "/zone-a"},
		"no node and no zone place the endpoint nowhere":     {podNode: "gone"},
		"an endpoint without a pod is placed by its nodeName": {
			noPod: true, endpointNode: "n", nodes: []*corev1.Node{newNode("n", placed("r", "z", "s"))}, want: "r/z/s",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := echoPod("a", "10.0.0.1")
			for k, v := range tc.podLabels {
				pod.Labels[k] = v
			}
			pod.Spec.NodeName = tc.podNode
			ep := podEndpoint("app", "a", "10.0.0.1")
			objs := []any{echoService()}
			if tc.noPod {
				ep.TargetRef = nil
			} else {
				objs = append(objs, pod)
			}
			if tc.endpointNode != "" {
				ep.NodeName = ptr.To(tc.endpointNode)
			}
			if tc.zone != "" {
				ep.Zone = ptr.To(tc.zone)
			}
			for _, n := range tc.nodes {
				objs = append(objs, n)
			}
			eps := endpoints(t, append(objs, grpcSlice("s", ep))...)
			if len(eps) != 1 {
				t.Fatalf("endpoints %+v", eps)
			}
			if eps[0].Locality != tc.want {
				t.Errorf("locality %q, want %q", eps[0].Locality, tc.want)
			}
		})
	}
}

func TestTransformTrimsNodes(t *testing.T) {
	labels := placed("r", "z", "s")
	labels[corev1.LabelFailureDomainBetaZone] = "old-z"
	labels[corev1.LabelHostname] = "n"
	node := newNode("n", labels)
	node.Annotations = map[string]string{"big": "value"}
	node.Spec.PodCIDR = "10.0.0.0/24"
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	out, err := transform(node)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := out.(*corev1.Node)
	if trimmed.Name != "n" || trimmed.Annotations != nil || trimmed.Spec.PodCIDR != "" || trimmed.Status.Conditions != nil {
		t.Errorf("node not trimmed: %+v", trimmed)
	}
	delete(labels, corev1.LabelHostname)
	if len(trimmed.Labels) != len(labels) || nodeLocality(trimmed.Labels) != "r/z/s" ||
		trimmed.Labels[corev1.LabelFailureDomainBetaZone] != "old-z" {
		t.Errorf("node labels %v, want %v", trimmed.Labels, labels)
	}
	again, _ := transform(trimmed)
	if !sameNode(trimmed, again.(*corev1.Node)) || again.(*corev1.Node).ResourceVersion != node.ResourceVersion {
		t.Error("transform is not idempotent")
	}
}
