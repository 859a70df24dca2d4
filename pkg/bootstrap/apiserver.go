package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
)

// Probing of the API server: how often, and how long one probe may take.
const (
	apiserverProbeInterval = 5 * time.Second
	apiserverProbeTimeout  = 5 * time.Second
)

// apiserverMonitor probes the API server's /readyz and says, once per
// outage, when it becomes unreachable and when it is back: a log line each
// way, the gauge bulwark_kube_apiserver_reachable and the counter
// bulwark_kube_apiserver_outages_total. It changes nothing else: every
// component keeps serving what it last synced and retries on its own.
type apiserverMonitor struct {
	probe    func(ctx context.Context) error
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	now      func() time.Time

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

// newAPIServerMonitor probes through client's REST client. /readyz is
// readable by every caller (system:public-info-viewer), and fails while
// the API server cannot reach etcd, when no other API call succeeds either.
func newAPIServerMonitor(client kubernetes.Interface, reg prometheus.Registerer, log *slog.Logger) *apiserverMonitor {
	probe := func(ctx context.Context) error {
		if err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
			return fmt.Errorf("probe /readyz: %w", err)
		}
		return nil
	}
	return newMonitor(probe, reg, log)
}

func newMonitor(probe func(context.Context) error, reg prometheus.Registerer, log *slog.Logger) *apiserverMonitor {
	m := &apiserverMonitor{
		probe:    probe,
		interval: apiserverProbeInterval,
		timeout:  apiserverProbeTimeout,
		log:      log.With("component", "apiserver"),
		now:      time.Now,
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

// Run probes until ctx is done.
func (m *apiserverMonitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, m.timeout)
		err := m.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		m.observe(err)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
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
