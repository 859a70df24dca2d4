package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkInject is a typical pod: an app and a helper container, an HTTP
// readiness probe, injected with the built-in config.
func BenchmarkInject(b *testing.B) {
	p := defaultParams(b)
	pod := appPod(nil, map[string]string{"app": "shop", "version": "v1"})
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: httpProbe("/ready", 8080)}
	b.ReportAllocs()
	for b.Loop() {
		res, err := Inject(pod, p)
		if err != nil || !res.Injected {
			b.Fatal(err)
		}
	}
}
