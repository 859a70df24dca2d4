package kubesource

import (
	"cmp"

	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// placement is where pod is, as Istio's registry places the proxy of a
// pod: its locality (its locality label, else its node's labels, "" when
// the node is not known) and its network (its network label, else its
// cluster's).
func (p *podLookup) placement(pod *corev1.Pod) (locality, network string) {
	locality = podLocality(pod.Labels)
	if locality == "" {
		locality, _ = p.nodeLocality(pod.Spec.NodeName)
	}
	return locality, cmp.Or(pod.Labels[model.NetworkLabel], p.r.topo.network)
}

// stalePods marks in t the pods whose placement changed, when check says
// it may have (a node's labels or the cluster's network changed), so that
// the pod collection makes them again although their objects are the
// same. A pod whose placement did not change keeps its model.
func (r *reuse) stalePods(pods *podLookup, check bool, t *touched) {
	if !check {
		return
	}
	for i, m := range r.pods.items {
		pod := r.pods.from[i]
		if pod == nil {
			continue
		}
		if l, n := pods.placement(pod); l != m.Locality || n != m.Network {
			r.pods.from[i] = nil // not the object it was made of any more
			mark(&t.pods, r.pods.keys[i])
		}
	}
}
