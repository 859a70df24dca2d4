package xds

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwark-mesh/bulwark/pkg/xds/report"
)

// metrics carries Istio's pilot metric names, so dashboards keep working.
type metrics struct {
	proxies     prometheus.Gauge
	pushes      *prometheus.CounterVec
	pushTime    *prometheus.HistogramVec
	convergence prometheus.Histogram
	configSize  *prometheus.HistogramVec
	rejects     *prometheus.CounterVec
	// pushTriggers counts pushes by what they changed: "endpoint" when
	// only endpoints, "service" when services, "config" otherwise.
	pushTriggers *prometheus.CounterVec
	// failClosed is bulwark_policy_fail_closed{kind,reason}.
	failClosed *prometheus.GaugeVec

	// byType holds pushTime and configSize of each served type, resolved
	// once rather than per response.
	byType map[string]typeObservers
}

type typeObservers struct{ pushTime, configSize prometheus.Observer }

// observe records one response of typeURL: the time taken to produce it
// and the size of its resources.
func (m *metrics) observe(typeURL string, took time.Duration, size int) {
	o, ok := m.byType[typeURL]
	if !ok {
		t := shortType(typeURL)
		o = typeObservers{m.pushTime.WithLabelValues(t), m.configSize.WithLabelValues(t)}
	}
	o.pushTime.Observe(took.Seconds())
	o.configSize.Observe(float64(size))
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		proxies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilot_xds", Help: "Number of proxies connected to this istiod over xDS.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_pushes", Help: "xDS responses sent, by type.",
		}, []string{"type"}),
		pushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pilot_xds_push_time", Help: "Seconds spent generating one xDS response, by type.",
			Buckets: []float64{.001, .01, .1, 1, 3, 5, 10, 20, 30},
		}, []string{"type"}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_proxy_convergence_time", Help: "Seconds from a configuration change to a proxy's acknowledgement of it.",
			Buckets: []float64{.1, .5, 1, 3, 5, 10, 20, 30},
		}),
		configSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pilot_xds_config_size_bytes", Help: "Size in bytes of the resources of one xDS response, by type.",
			Buckets: []float64{1 << 10, 10 << 10, 100 << 10, 1 << 20, 10 << 20},
		}, []string{"type"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_total_xds_rejects", Help: "xDS responses rejected by proxies, by type.",
		}, []string{"type"}),
		pushTriggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_push_triggers", Help: "Pushes of model changes, by what they changed: endpoint (endpoints only), service (services and endpoints), config (anything else).",
		}, []string{"type"}),
		failClosed: report.NewFailClosedGauge(),
	}
	m.byType = make(map[string]typeObservers)
	for _, t := range []string{typeListener, typeRoute, typeCluster, typeEndpoint, typeSecret} {
		m.byType[t] = typeObservers{m.pushTime.WithLabelValues(shortType(t)), m.configSize.WithLabelValues(shortType(t))}
	}
	if reg != nil {
		reg.MustRegister(m.proxies, m.pushes, m.pushTime, m.convergence, m.configSize, m.rejects, m.pushTriggers, m.failClosed)
	}
	return m
}

// shortType is Istio's short type label.
func shortType(typeURL string) string {
	switch typeURL {
	case typeListener:
		return "lds"
	case typeRoute:
		return "rds"
	case typeCluster:
		return "cds"
	case typeEndpoint:
		return "eds"
	case typeSecret:
		return "sds"
	}
	return "other"
}
