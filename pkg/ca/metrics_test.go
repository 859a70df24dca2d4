package ca

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollectorsKeepTheirNamesAndValues(t *testing.T) {
	c := newTestCA(t, nil)
	mustLoad(t, c)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collectors()...)
	root := c.Current().Roots[0]
	want := `
# HELP bulwark_ca_root_rotation_phase 1 for the phase the root rotation is in (idle, prepare or activate), 0 for the others.
# TYPE bulwark_ca_root_rotation_phase gauge
bulwark_ca_root_rotation_phase{phase="activate"} 0
bulwark_ca_root_rotation_phase{phase="idle"} 1
bulwark_ca_root_rotation_phase{phase="prepare"} 0
# HELP bulwark_ca_root_rotation_unacked_proxies Connected proxies, of every replica, whose trust bundle lacks the new root while a rotation prepares.
# TYPE bulwark_ca_root_rotation_unacked_proxies gauge
bulwark_ca_root_rotation_unacked_proxies 0
# HELP citadel_server_cert_chain_expiry_timestamp Unix time at which the CA's signing certificate expires.
# TYPE citadel_server_cert_chain_expiry_timestamp gauge
citadel_server_cert_chain_expiry_timestamp ` + fmtFloat(c.SigningCert().NotAfter.Unix()) + `
# HELP citadel_server_root_cert_expiry_timestamp Unix time at which the earliest-expiring root of the trust bundle expires.
# TYPE citadel_server_root_cert_expiry_timestamp gauge
citadel_server_root_cert_expiry_timestamp ` + fmtFloat(root.NotAfter.Unix()) + `
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"bulwark_ca_root_rotation_phase", "bulwark_ca_root_rotation_unacked_proxies",
		"citadel_server_cert_chain_expiry_timestamp", "citadel_server_root_cert_expiry_timestamp"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "bulwark_ca_trust_bundle_root_expiry_timestamp"); err != nil || n != 1 {
		t.Errorf("bulwark_ca_trust_bundle_root_expiry_timestamp: %d samples (%v), want 1 for the one root", n, err)
	}
}

func fmtFloat(unix int64) string { return strconv.FormatFloat(float64(unix), 'g', -1, 64) }
