package bootstrap

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// IgnoredSetting is a setting of Istio's istiod that istiod was given and
// does not read (an environment variable, say): Name, and what istiod
// does Instead.
type IgnoredSetting struct {
	Name, Instead string
}

var ignoredSettingDesc = prometheus.NewDesc("bulwark_ignored_setting",
	"1 for each setting of Istio's istiod that istiod was given at start and does not read (the WARN line at start says what it does instead).",
	[]string{"name"}, nil)

// reportIgnoredSettings logs one warning per setting and registers the
// gauge bulwark_ignored_setting{name}, one series of value 1 per setting.
func reportIgnoredSettings(settings []IgnoredSetting, reg prometheus.Registerer, log *slog.Logger) error {
	for _, s := range settings {
		log.Warn("Istio setting not read", "name", s.Name, "instead", s.Instead)
	}
	return reg.Register(ignoredSettings(settings))
}

// ignoredSettings collects bulwark_ignored_setting.
type ignoredSettings []IgnoredSetting

func (ignoredSettings) Describe(ch chan<- *prometheus.Desc) { ch <- ignoredSettingDesc }

func (c ignoredSettings) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c {
		ch <- prometheus.MustNewConstMetric(ignoredSettingDesc, prometheus.GaugeValue, 1, s.Name)
	}
}
