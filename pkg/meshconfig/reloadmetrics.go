package meshconfig

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a reload, the values of bulwark_config_reloads_total's
// result label.
const (
	resultApplied  = "applied"
	resultRejected = "rejected"
)

// ReloadMetrics count the reloads of istiod's watched configuration
// files: bulwark_config_reloads_total{config,result} (a new version
// applied, or a new refusal: a resync of the same bad file is not counted
// again) and bulwark_config_rejected{config} (1 while the file on disk is
// refused and the last good version serves). A nil *ReloadMetrics counts
// nothing.
type ReloadMetrics struct {
	reloads *prometheus.CounterVec
	refused *prometheus.GaugeVec
}

// NewReloadMetrics registers the reload metrics with reg (none when nil).
func NewReloadMetrics(reg prometheus.Registerer) (*ReloadMetrics, error) {
	m := &ReloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_config_reloads_total",
			Help: "Reloads of a watched configuration file (config: mesh, meshNetworks): applied, or rejected (the last good version keeps serving).",
		}, []string{"config", "result"}),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bulwark_config_rejected",
			Help: "1 while the watched configuration file (config: mesh, meshNetworks) is refused and its last good version serves.",
		}, []string{"config"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.reloads, m.refused} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("config reload metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *ReloadMetrics) count(config, result string) {
	if m != nil {
		m.reloads.WithLabelValues(config, result).Inc()
	}
}

func (m *ReloadMetrics) rejected(config string, refused bool) {
	if m == nil {
		return
	}
	v := 0.0
	if refused {
		v = 1
	}
	m.refused.WithLabelValues(config).Set(v)
}
