package inject

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Reasons reported with every decision, for logs.
const (
	ReasonHostNetwork     = "pod uses host networking"
	ReasonSystemNamespace = "namespace is a Kubernetes system namespace"
	ReasonNamespaceOff    = "namespace is labelled istio-injection=disabled"
	ReasonIstiod          = "pod is an istiod pod"
	ReasonAlreadyInjected = "pod is already injected"
	ReasonPodDisabled     = "pod label or annotation sidecar.istio.io/inject is not true"
	ReasonPodEnabled      = "pod label or annotation sidecar.istio.io/inject is true"
	ReasonNeverSelector   = "pod matches neverInjectSelector"
	ReasonAlwaysSelector  = "pod matches alwaysInjectSelector"
	ReasonPolicyEnabled   = "policy is enabled"
	ReasonPolicyDisabled  = "policy is disabled"
)

// ignoredNamespaces are never injected, whatever the labels say.
var ignoredNamespaces = map[string]bool{
	"kube-system": true, "kube-public": true, "kube-node-lease": true,
}

// decide says whether the pod should be injected, in Istio's order, and why.
func decide(pod *corev1.Pod, namespace string, nsLabels map[string]string, cfg *Config) (bool, string) {
	if pod.Spec.HostNetwork {
		return false, ReasonHostNetwork
	}
	if ignoredNamespaces[namespace] {
		return false, ReasonSystemNamespace
	}
	if nsLabels["istio-injection"] == "disabled" {
		return false, ReasonNamespaceOff
	}
	if pod.Labels["app"] == "istiod" || pod.Labels["istio"] == "pilot" {
		return false, ReasonIstiod
	}
	if _, ok := pod.Annotations[AnnotationStatus]; ok {
		return false, ReasonAlreadyInjected
	}

	selector := pod.Annotations[AnnotationInject]
	if lbl, ok := pod.Labels[LabelInject]; ok {
		// The label is the newer API; when both are present it wins.
		selector = lbl
	}
	switch strings.ToLower(selector) {
	case "y", "yes", "true", "on":
		return true, ReasonPodEnabled
	case "":
	default:
		return false, ReasonPodDisabled
	}

	set := labels.Set(pod.Labels)
	for _, s := range cfg.never {
		if !s.Empty() && s.Matches(set) {
			return false, ReasonNeverSelector
		}
	}
	for _, s := range cfg.always {
		if !s.Empty() && s.Matches(set) {
			return true, ReasonAlwaysSelector
		}
	}
	if cfg.Policy == PolicyEnabled {
		return true, ReasonPolicyEnabled
	}
	return false, ReasonPolicyDisabled
}
