package generation

import (
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// telemetry is the standard telemetry of mc's proxies. A format beyond
// the bound (which mesh config validation refuses first) leaves the
// access log off rather than the proxies without configuration.
func telemetry(mc *meshv1alpha1.MeshConfig) *envoygen.Telemetry {
	c := envoygen.TelemetryFromMesh(mc)
	t, err := envoygen.NewTelemetry(c)
	if err != nil {
		c.AccessLogFile, c.AccessLogFormat = "", ""
		t, _ = envoygen.NewTelemetry(c) // without a format, nothing can fail
	}
	return t
}
