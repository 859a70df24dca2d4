package kubesource

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// transform trims an object before the informer caches it. A pod or a node
// keeps only what the model reads (a cluster has many, each large);
// EndpointSlices lose their annotations and Services all but their
// exportTo and node selector (a NodePort gateway's), which the model reads; every object loses its managed fields.
// It is idempotent, as informers require.
// Tombstones and objects without metadata pass unchanged.
func transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o), nil
	case *corev1.Node:
		return trimNode(o), nil
	case *corev1.Service:
		o.SetManagedFields(nil)
		var keep map[string]string
		for _, k := range [...]string{model.ExportToAnnotation, model.NodeSelectorAnnotation} {
			if v, ok := o.Annotations[k]; ok {
				if keep == nil {
					keep = map[string]string{}
				}
				keep[k] = v
			}
		}
		o.SetAnnotations(keep)
		return obj, nil
	case *discoveryv1.EndpointSlice:
		o.SetManagedFields(nil)
		o.SetAnnotations(nil)
		return obj, nil
	case metav1.Object:
		o.SetManagedFields(nil)
		return obj, nil
	default:
		return obj, nil
	}
}

// trimPod is the part of pod the model reads: identity, labels, service
// account, node and addresses.
func trimPod(pod *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Labels:            pod.Labels,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{ServiceAccountName: pod.Spec.ServiceAccountName, NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{
			Phase:  pod.Status.Phase,
			PodIP:  pod.Status.PodIP,
			PodIPs: pod.Status.PodIPs,
		},
	}
}

// samePod reports whether two trimmed versions of a pod are the same to
// the model: a pod's status changes often in ways the model never reads.
func samePod(a, b *corev1.Pod) bool {
	return a.UID == b.UID &&
		a.Spec.ServiceAccountName == b.Spec.ServiceAccountName &&
		a.Spec.NodeName == b.Spec.NodeName &&
		a.Status.Phase == b.Status.Phase &&
		a.Status.PodIP == b.Status.PodIP &&
		slices.Equal(a.Status.PodIPs, b.Status.PodIPs) &&
		maps.Equal(a.Labels, b.Labels) &&
		(a.DeletionTimestamp == nil) == (b.DeletionTimestamp == nil)
}
