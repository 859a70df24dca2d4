package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/inject"
)

// TestPodsWithoutPCDSAreCounted: istiod, with the chart's RBAC, counts on
// /metrics the running pods whose injected proxy does not take the trust
// bundle over xDS, by revision: one injected with PROXY_CONFIG_XDS_AGENT
// off (as Istio's injector leaves it) is counted, one injected by
// default is not, and a deleted one no longer is.
func TestPodsWithoutPCDSAreCounted(t *testing.T) {
	env := testenv.Get(t)
	p := startIstiod(t, env)
	client := env.Client(t)
	ns := env.Namespace(t)
	const series = `bulwark_proxies_without_pcds{revision="1-23"}`
	before := max(p.metric(t, series), 0)

	cfg, vals, err := inject.ParseConfig(nil, []byte(`{"revision":"1-23"}`))
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string, annos map[string]string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annos},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
		}
		injected, res, err := inject.Mutate(pod, inject.Params{Namespace: ns, Config: cfg, Values: vals})
		if err != nil || !res.Injected {
			t.Fatalf("inject %s: %v %s", name, err, res.Reason)
		}
		if _, err := client.CoreV1().Pods(ns).Create(context.Background(), injected, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
	}
	create("with-pcds", nil)
	create("without-pcds", map[string]string{inject.AnnotationProxyConfig: `{"proxyMetadata":{"PROXY_CONFIG_XDS_AGENT":"false"}}`})

	// One watch delivers both pods in order: once the second is counted,
	// the first, created before it, has been seen, and counting it would
	// have made the gauge before+2.
	waitFor(t, "the pod without PCDS counted, alone", 30*time.Second, func() bool { return p.metric(t, series) == before+1 })
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), "without-pcds", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod no longer counted", 30*time.Second, func() bool { return max(p.metric(t, series), 0) == before })
}
