package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultParams is the built-in configuration for namespace "default".
func defaultParams(t testing.TB) Params {
	t.Helper()
	cfg, vals, err := ParseConfig(nil, nil)
	if err != nil {
		t.Fatalf("parse defaults: %v", err)
	}
	return Params{Namespace: "default", Config: cfg, Values: vals}
}

// appPod is a typical pod: an app container and a metrics sidecar of its own.
func appPod(annos, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", Annotations: annos, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "example.com/app:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
			{Name: "metrics", Image: "example.com/metrics:1"},
		}},
	}
}

func findContainer(list []corev1.Container, name string) *corev1.Container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func countProxies(pod *corev1.Pod) int {
	n := 0
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == ProxyContainerName {
				n++
			}
		}
	}
	return n
}

func proxyOf(pod *corev1.Pod) *corev1.Container {
	if c := findContainer(pod.Spec.Containers, ProxyContainerName); c != nil {
		return c
	}
	return findContainer(pod.Spec.InitContainers, ProxyContainerName)
}

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}
