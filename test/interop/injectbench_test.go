package interop

import (
	"testing"

	bulwarkinject "github.com/bulwark-mesh/bulwark/pkg/inject"
)

// The two benchmarks below inject the same typical pod (pkg/inject's
// BenchmarkInject: an app and a helper container, an HTTP readiness probe)
// with the same values, and measure the same thing: from the pod to the
// injected pod through a JSON patch. Istio's injector is run as
// istioctl kube-inject runs it (IntoObject: render, merge, post-process,
// create the patch, apply it); Bulwark's is Inject and the same patch
// application. Run them together to read the ratio off one run:
//
//	go test -run '^$' -bench 'Inject$' -benchmem .

func BenchmarkIstioInject(b *testing.B) {
	pod := parsePod(b, benchPodYAML)
	in := newInjectors(b, pod.Namespace, "")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.istio(pod); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBulwarkInject(b *testing.B) {
	pod := parsePod(b, benchPodYAML)
	in := newInjectors(b, pod.Namespace, "")
	b.ReportAllocs()
	for b.Loop() {
		res, err := bulwarkinject.Inject(pod, in.ours)
		if err != nil || !res.Injected {
			b.Fatal(err)
		}
		if _, err := applyPatch(pod, res.Patch); err != nil {
			b.Fatal(err)
		}
	}
}
