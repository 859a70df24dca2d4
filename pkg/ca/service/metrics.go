package service

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the CSR API's Prometheus metrics, named as Istio names them so
// that existing dashboards and alerts keep working.
type Metrics struct {
	csrs          prometheus.Counter
	authnFailures prometheus.Counter
	// authnUnavailable counts the authentication failures that were
	// answered Unavailable: the credential's backend could not be reached.
	authnUnavailable prometheus.Counter
	parseErrors      prometheus.Counter
	signErrors       *prometheus.CounterVec
	issued           prometheus.Counter
	// issuedByCluster counts issued certificates by the cluster that
	// authenticated the caller; its values are istiod's own cluster and
	// the registered remote ones, never a claimed cluster.
	issuedByCluster *prometheus.CounterVec
	rateLimited     prometheus.Counter
	signLatency     prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		csrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_csr_count",
			Help: "The number of CSRs received by the CA server.",
		}),
		authnFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_authentication_failure_count",
			Help: "The number of authentication failures.",
		}),
		authnUnavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulwark_csr_authentication_unavailable_total",
			Help: "Authentication failures answered Unavailable because the credential's backend (TokenReview, OIDC keys) could not be reached; also counted in citadel_server_authentication_failure_count.",
		}),
		parseErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_csr_parsing_err_count",
			Help: "The number of CSRs that could not be parsed or broke the CSR policy.",
		}),
		signErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citadel_server_csr_sign_err_count",
			Help: "The number of errors while signing CSRs, by error kind.",
		}, []string{"error"}),
		issued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_success_cert_issuance_count",
			Help: "The number of certificates issued.",
		}),
		issuedByCluster: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_csr_issued_by_cluster_total",
			Help: "Certificates issued, by the cluster whose API server authenticated the caller (\"\" for istiod's own cluster when it has no ID, client certificates and OIDC tokens).",
		}, []string{"cluster"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "citadel_server_csr_rate_limited_count",
			Help: "The number of CSRs refused with ResourceExhausted by the rate limiter.",
		}),
		signLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "citadel_server_csr_sign_duration_seconds",
			Help:    "Time to check and sign a CSR, from a parsed request to a verified chain.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25},
		}),
	}
	reg.MustRegister(m.csrs, m.authnFailures, m.authnUnavailable, m.parseErrors, m.signErrors, m.issued, m.issuedByCluster, m.rateLimited, m.signLatency)
	return m
}
