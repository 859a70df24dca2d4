package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/kubewatch"
)

// Probing of the API server: how often while it answers, how often while
// it does not or a request waits for it (the delay between its return and
// the informers' resync), and how long one probe may take.
const (
	apiserverProbeInterval     = 5 * time.Second
	apiserverFastProbeInterval = 500 * time.Millisecond
	apiserverProbeTimeout      = 5 * time.Second
)

// apiserverMonitor probes the API server's /readyz and says, once per
// outage, when it becomes unreachable and when it is back: a log line each
// way, the gauge bulwark_kube_apiserver_reachable and the counter
// bulwark_kube_apiserver_outages_total. Every component keeps serving
// what it last synced; the monitor drives gate, behind which the
// informers' lists and watches wait while the API server is away and go
// again as soon as a probe sees it back. While it is away, or a request
// waits, it probes every fastInterval.
type apiserverMonitor struct {
	probe        func(ctx context.Context) error
	gate         *kubewatch.Gate
	interval     time.Duration
	fastInterval time.Duration
	timeout      time.Duration
	log          *slog.Logger
	now          func() time.Time

	outages prometheus.Counter

	mu    sync.Mutex
	state apiserverState
	since time.Time // when state began
}

type apiserverState int

const (
	apiserverUnknown apiserverState = iota
	apiserverUp
	apiserverDown
)

// newAPIServerMonitor probes through client's REST client, which must not
// be behind gate. /readyz is readable by every caller
// (system:public-info-viewer), and fails while the API server cannot reach
// etcd, when no other API call succeeds either.
func newAPIServerMonitor(client kubernetes.Interface, gate *kubewatch.Gate, reg prometheus.Registerer, log *slog.Logger) *apiserverMonitor {
	probe := func(ctx context.Context) error {
		if err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
			return fmt.Errorf("probe /readyz: %w", err)
		}
		return nil
	}
	return newMonitor(probe, gate, reg, log)
}

func newMonitor(probe func(context.Context) error, gate *kubewatch.Gate, reg prometheus.Registerer, log *slog.Logger) *apiserverMonitor {
	m := &apiserverMonitor{
		probe:        probe,
		gate:         gate,
		interval:     apiserverProbeInterval,
		fastInterval: apiserverFastProbeInterval,
		timeout:      apiserverProbeTimeout,
		log:          log.With("component", "apiserver"),
		now:          time.Now,
		outages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulwark_kube_apiserver_outages_total",
			Help: "Times the Kubernetes API server became unreachable for istiod.",
		}),
	}
	reg.MustRegister(m.outages, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bulwark_kube_apiserver_reachable",
		Help: "1 while the Kubernetes API server answers istiod's probe of /readyz; 0 while it does not (istiod serves its last synced state) and before the first answer.",
	}, func() float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.state == apiserverUp {
			return 1
		}
		return 0
	}))
	return m
}

// Run probes until ctx is done, every interval while the API server
// answers and every fastInterval while it does not. A request waiting at
// the gate has the next probe start at once, though never sooner than
// fastInterval after the last began.
func (m *apiserverMonitor) Run(ctx context.Context) error {
	m.gate.Start()
	defer m.gate.Stop()
	for {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, m.timeout)
		err := m.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		m.observe(err)
		m.gate.Probed(start, err == nil)
		next := m.interval
		if err != nil {
			next = m.fastInterval
		}
		tick := time.NewTimer(time.Until(start.Add(next)))
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil
		case <-tick.C:
		case <-m.gate.Kicked():
			tick.Stop()
			select { // not sooner than fastInterval after the last probe
			case <-ctx.Done():
				return nil
			case <-time.After(time.Until(start.Add(m.fastInterval))):
			}
		}
	}
}

// observe records one probe's result, logging only changes.
func (m *apiserverMonitor) observe(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	switch {
	case err != nil && m.state != apiserverDown:
		m.log.Warn("kubernetes API server unreachable: istiod serves the last synced state; "+
			"certificates for client-certificate callers are still signed, token callers are told to retry",
			"err", err)
		m.state, m.since = apiserverDown, now
		m.outages.Inc()
	case err == nil && m.state == apiserverDown:
		m.log.Info("kubernetes API server reachable again: caches resync", "outage", now.Sub(m.since).Round(time.Millisecond))
		m.state, m.since = apiserverUp, now
	case err == nil && m.state == apiserverUnknown:
		m.state, m.since = apiserverUp, now
	}
}

// Unreachable reports whether the last probe failed, and since when.
func (m *apiserverMonitor) Unreachable() (bool, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state == apiserverDown, m.since
}
