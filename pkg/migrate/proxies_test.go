package migrate

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Proxies counts the running pods whose proxy lacks PCDS, by revision,
// and forgets a pod once it is deleted; ListProxies lists the same.
func TestProxiesCountsPodsWithoutPCDS(t *testing.T) {
	c := startCluster(t)
	ns := c.env.Namespace(t)
	c.injectedPod(t, ns, "old-1", "default", false)
	c.injectedPod(t, ns, "old-2", "1-23", false)
	c.injectedPod(t, ns, "new", "bulwark", true)

	p, err := NewProxies(c.client, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	want := []Proxy{{Namespace: ns, Name: "old-1", Revision: "default"}, {Namespace: ns, Name: "old-2", Revision: "1-23"}}
	waitFor(t, "both old pods counted", func() bool { return slices.Equal(proxiesIn(p.List(), ns), want) })
	listed, err := ListProxies(ctxFor(t), c.client)
	if err != nil {
		t.Fatal(err)
	}
	if got := proxiesIn(listed, ns); !slices.Equal(got, want) {
		t.Errorf("ListProxies = %v, want %v", got, want)
	}

	if err := c.client.CoreV1().Pods(ns).Delete(ctxFor(t), "old-2", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod forgotten", func() bool { return slices.Equal(proxiesIn(p.List(), ns), want[:1]) })

	// Other tests' pods stay (no controller-manager collects them), so
	// the gauge is checked against List, which holds them too.
	byRev := map[string]int{}
	for _, px := range p.List() {
		byRev[px.Revision]++
	}
	var exp strings.Builder
	exp.WriteString("# HELP bulwark_proxies_without_pcds " + withoutPCDSHelp + "\n# TYPE bulwark_proxies_without_pcds gauge\n")
	for _, rev := range []string{"1-23", "bulwark", "default"} {
		if n, ok := byRev[rev]; ok {
			exp.WriteString("bulwark_proxies_without_pcds{revision=\"" + rev + "\"} " + strconv.Itoa(n) + "\n")
		}
	}
	if err := testutil.CollectAndCompare(p.Collector(), strings.NewReader(exp.String())); err != nil {
		t.Error(err)
	}
	if byRev["bulwark"] != 0 {
		t.Errorf("a pod with PCDS was counted: %v", p.List())
	}
}

// waitFor polls cond until it holds, failing after the timeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An informer may transform an object twice: trimming a trimmed pod
// changes nothing, and what is told of the pod survives the trim.
func TestTrimPodIsIdempotent(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"istio.io/rev": "1-23", "app": "a"},
			Annotations: map[string]string{"sidecar.istio.io/status": `{"revision":"1-23"}`, "other": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "app"},
			{Name: "istio-proxy", Image: "proxy", Env: []corev1.EnvVar{{Name: "A", Value: "b"}, {Name: "PROXY_CONFIG_XDS_AGENT", Value: "false"}}},
		}},
	}
	once, _ := trimPod(pod)
	twice, _ := trimPod(once)
	if !equality.Semantic.DeepEqual(once, twice) {
		t.Errorf("trim of a trimmed pod changed it:\n%+v\n%+v", once, twice)
	}
	full, _ := proxyOf(pod)
	trimmed, ok := proxyOf(twice.(*corev1.Pod))
	if !ok || full != trimmed {
		t.Errorf("proxyOf(trimmed) = %v, %v; of the pod %v", trimmed, ok, full)
	}
}
