package inject

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
)

// Load of BenchmarkInjectHandlerTLS: a steady rate, as kube-apiserver sends
// pod creations, for long enough to give a stable p99.
const (
	handlerRate     = 200 // requests per second
	handlerDuration = 3 * time.Second
)

// BenchmarkInjectHandlerTLS serves NewHandler over TLS on loopback and
// sends it the typical pod of BenchmarkInject as AdmissionReviews at a
// fixed 200 requests/s (open loop: each request leaves on schedule, even
// if earlier ones are still waiting), and reports the latency percentiles
// of whole requests, TLS included. One iteration is one run of
// handlerDuration; ns/op is the mean request latency.
func BenchmarkInjectHandlerTLS(b *testing.B) {
	srv := httptest.NewTLSServer(NewHandler(NewStore(), nil))
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64

	pod := appPod(nil, map[string]string{"app": "shop", "version": "v1"})
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: httpProbe("/ready", 8080)}
	body := reviewBody(b, admission.APIVersionV1, pod)
	send := func() (time.Duration, error) {
		start := time.Now()
		resp, err := client.Post(srv.URL+"/inject", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			b.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(start), err
	}
	if _, err := send(); err != nil { // handshake and warm-up, not measured
		b.Fatal(err)
	}

	var all []time.Duration
	for b.Loop() {
		all = append(all, pacedRun(b, send)...)
	}
	slices.Sort(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(sum)/float64(len(all)), "ns/op")
	b.ReportMetric(ms(all[len(all)*50/100]), "p50-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "p99-ms")
	b.ReportMetric(float64(len(all))/float64(b.N), "requests/op")
}

// pacedRun sends handlerRate requests a second for handlerDuration and
// returns their latencies.
func pacedRun(b *testing.B, send func() (time.Duration, error)) []time.Duration {
	n := int(handlerDuration.Seconds() * handlerRate)
	interval := time.Second / handlerRate
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		wg.Go(func() {
			d, err := send()
			if err != nil {
				b.Error(err)
			}
			lat[i] = d
		})
	}
	wg.Wait()
	return lat
}
