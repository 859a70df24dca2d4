package multicluster

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are Istio's remote-cluster metrics, under Istio's names.
type metrics struct {
	clusters *prometheus.GaugeVec   // istiod_managed_clusters{cluster_type}
	status   *prometheus.GaugeVec   // istiod_remote_cluster_sync_status{cluster,cluster_type,status}
	timeouts prometheus.Counter     // remote_cluster_sync_timeouts_total
	events   *prometheus.CounterVec // remote_cluster_secret_events_total{event}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		clusters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "istiod_managed_clusters",
			Help: "Number of clusters managed by istiod, by cluster_type (local, remote).",
		}, []string{"cluster_type"}),
		status: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "istiod_remote_cluster_sync_status",
			Help: "Sync state of each remote cluster: 1 for its current status (syncing, synced, timeout, closed), 0 for the others.",
		}, []string{"cluster", "cluster_type", "status"}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "remote_cluster_sync_timeouts_total",
			Help: "Number of times a remote cluster's API server did not answer within the sync timeout.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "remote_cluster_secret_events_total",
			Help: "Number of remote secret events, by event (add, update, delete).",
		}, []string{"event"}),
	}
	m.clusters.WithLabelValues("local").Set(1)
	m.clusters.WithLabelValues("remote").Set(0)
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.clusters, m.status, m.timeouts, m.events} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("multicluster metrics: %w", err)
		}
	}
	return m, nil
}

// setStatus records status as cluster's one current state.
func (m *metrics) setStatus(cluster, status string) {
	for _, s := range []string{StatusSyncing, StatusSynced, StatusTimeout, StatusClosed} {
		v := 0.0
		if s == status {
			v = 1
		}
		m.status.WithLabelValues(cluster, "remote", s).Set(v)
	}
}
