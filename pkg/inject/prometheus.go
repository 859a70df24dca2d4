package inject

import (
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Prometheus annotations and the variable that carries the app's own
// scrape settings to the agent, which merges app and Envoy metrics.
const (
	annoPromScrape  = "prometheus.io/scrape"
	annoPromPath    = "prometheus.io/path"
	annoPromPort    = "prometheus.io/port"
	EnvPromScrape   = "ISTIO_PROMETHEUS_ANNOTATIONS"
	mergedStatsPath = "/stats/prometheus"
)

type promScrape struct {
	Scrape string `json:"scrape"`
	Path   string `json:"path"`
	Port   string `json:"port"`
}

// prometheusMerge points the prometheus.io annotations at the agent, as
// Istio does when meshConfig.enablePrometheusMerge is on, and returns the
// variable holding the app's original settings, if it had any.
func prometheusMerge(pod *corev1.Pod, v *Values) ([]corev1.EnvVar, bool) {
	annos := pod.Annotations
	if !v.PrometheusMerge() || annos[AnnotationPromMerge] == "false" || annos[annoPromScrape] == "false" {
		return nil, false
	}
	target := strconv.Itoa(int(v.Global.Proxy.StatusPort))
	if annos[annoPromPort] == target {
		return nil, false
	}
	orig := promScrape{Scrape: annos[annoPromScrape], Path: annos[annoPromPath], Port: annos[annoPromPort]}
	var env []corev1.EnvVar
	if orig != (promScrape{}) {
		b, err := json.Marshal(orig)
		if err == nil {
			env = append(env, valueEnv(EnvPromScrape, string(b)))
		}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annoPromPort] = target
	pod.Annotations[annoPromPath] = mergedStatsPath
	pod.Annotations[annoPromScrape] = "true"
	return env, true
}
