package ca

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the CA's Prometheus collectors: the expiry of the trust
// bundle's earliest root and of the signing certificate (Istio's names),
// and root rotation (phase, the proxies it waits for, each root's expiry).
func (c *CA) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "citadel_server_root_cert_expiry_timestamp",
			Help: "Unix time at which the earliest-expiring root of the trust bundle expires.",
		}, func() float64 {
			b := c.Current()
			if b == nil || len(b.Roots) == 0 {
				return 0
			}
			earliest := b.Roots[0].NotAfter
			for _, r := range b.Roots[1:] {
				if r.NotAfter.Before(earliest) {
					earliest = r.NotAfter
				}
			}
			return float64(earliest.Unix())
		}),
		rotationCollector{c.rot},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "citadel_server_cert_chain_expiry_timestamp",
			Help: "Unix time at which the CA's signing certificate expires.",
		}, func() float64 {
			if cert := c.SigningCert(); cert != nil {
				return float64(cert.NotAfter.Unix())
			}
			return 0
		}),
	}
}

// rotationCollector reports root rotation: the phase, the proxies it
// waits for and the expiry of each root of the trust bundle.
type rotationCollector struct{ rot *Rotator }

var (
	rotationPhaseDesc = prometheus.NewDesc("bulwark_ca_root_rotation_phase",
		"1 for the phase the root rotation is in (idle, prepare or activate), 0 for the others.", []string{"phase"}, nil)
	rotationUnackedDesc = prometheus.NewDesc("bulwark_ca_root_rotation_unacked_proxies",
		"Connected proxies, of every replica, whose trust bundle lacks the new root while a rotation prepares.", nil, nil)
	bundleRootExpiryDesc = prometheus.NewDesc("bulwark_ca_trust_bundle_root_expiry_timestamp",
		"Unix time at which each root of the trust bundle expires, by the first 16 hex digits of its SHA-256.", []string{"root"}, nil)
)

func (rotationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rotationPhaseDesc
	ch <- rotationUnackedDesc
	ch <- bundleRootExpiryDesc
}

func (c rotationCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.rot.Status()
	for _, p := range []Phase{PhaseIdle, PhasePrepare, PhaseActivate} {
		v := 0.0
		if st.Phase == p {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(rotationPhaseDesc, prometheus.GaugeValue, v, cmp.Or(string(p), "idle"))
	}
	ch <- prometheus.MustNewConstMetric(rotationUnackedDesc, prometheus.GaugeValue, float64(len(st.Unacked)))
	for _, r := range st.Roots {
		sum := sha256.Sum256(r.Raw)
		ch <- prometheus.MustNewConstMetric(bundleRootExpiryDesc, prometheus.GaugeValue, float64(r.NotAfter.Unix()), hex.EncodeToString(sum[:8]))
	}
}
