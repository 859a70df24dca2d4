package meshconfig

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/reflect/protoreflect"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// honoured are the top-level MeshConfig fields istiod acts on, by JSON
// name: the README's mesh configuration table. Every other field a
// document sets is read and ignored, and NotHonoured names it.
var honoured = map[string]bool{
	"outboundTrafficPolicy":          true,
	"enableAutoMtls":                 true,
	"h2UpgradePolicy":                true,
	"rootNamespace":                  true,
	"trustDomain":                    true,
	"trustDomainAliases":             true,
	"defaultServiceExportTo":         true,
	"defaultDestinationRuleExportTo": true,
	"defaultVirtualServiceExportTo":  true,
	"defaultHttpRetryPolicy":         true,
	"tlsDefaults":                    true,
	"defaultConfig":                  true, // injected as PROXY_CONFIG, read by pilot-agent
	"enablePrometheusMerge":          true,
	"defaultProviders":               true, // but tracing, below
	"extensionProviders":             true, // the kinds not generated are reported by the telemetry generator
	"accessLogFile":                  true,
	"accessLogEncoding":              true,
	"accessLogFormat":                true,
}

// dnsCapture is the proxy metadata that turns pilot-agent's DNS proxy on.
const dnsCapture = "ISTIO_META_DNS_CAPTURE"

// NotHonoured names the fields mc sets that istiod does not act on (for
// example ingressClass, localityLbSetting, enableTracing,
// defaultProviders.tracing, defaultConfig.proxyMetadata's
// ISTIO_META_DNS_CAPTURE), sorted. A field left at its zero value is not
// named: it asks for nothing.
func NotHonoured(mc *meshv1alpha1.MeshConfig) []string {
	var names []string
	mc.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !honoured[fd.JSONName()] {
			names = append(names, fd.JSONName())
		}
		return true
	})
	if len(mc.GetDefaultProviders().GetTracing()) > 0 {
		names = append(names, "defaultProviders.tracing")
	}
	if strings.EqualFold(mc.GetDefaultConfig().GetProxyMetadata()[dnsCapture], "true") {
		// pilot-agent reads it and asks for the DNS name table, which
		// istiod does not serve.
		names = append(names, "defaultConfig.proxyMetadata."+dnsCapture)
	}
	slices.Sort(names)
	return names
}

var notHonouredDesc = prometheus.NewDesc("bulwark_mesh_config_ignored_field",
	"1 for each field the mesh configuration in force sets and istiod does not act on.",
	[]string{"field"}, nil)

// Collector returns the gauge bulwark_mesh_config_ignored_field{field}: one
// series, of value 1, per field of the configuration in force that istiod
// does not act on (NotHonoured).
func (w *Watcher) Collector() prometheus.Collector { return ignoredCollector{w} }

type ignoredCollector struct{ w *Watcher }

func (ignoredCollector) Describe(ch chan<- *prometheus.Desc) { ch <- notHonouredDesc }

func (c ignoredCollector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range NotHonoured(c.w.Current()) {
		ch <- prometheus.MustNewConstMetric(notHonouredDesc, prometheus.GaugeValue, 1, f)
	}
}
