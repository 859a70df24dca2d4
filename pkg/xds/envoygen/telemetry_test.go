package envoygen

import (
	"strings"
	"testing"

	fileaccesslog "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

func TestTelemetryFromMesh(t *testing.T) {
	prom := func(name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
		return &meshv1alpha1.MeshConfig_ExtensionProvider{Name: name, Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus{
			Prometheus: &meshv1alpha1.MeshConfig_ExtensionProvider_PrometheusMetricsProvider{}}}
	}
	for name, tc := range map[string]struct {
		mc      *meshv1alpha1.MeshConfig
		metrics bool
	}{
		"no mesh config has metrics, as Istio installs it": {nil, true},
		"no defaultProviders has metrics":                  {&meshv1alpha1.MeshConfig{}, true},
		"empty defaultProviders.metrics has none": {&meshv1alpha1.MeshConfig{
			DefaultProviders: &meshv1alpha1.MeshConfig_DefaultProviders{}}, false},
		"the built-in prometheus provider": {&meshv1alpha1.MeshConfig{
			DefaultProviders: &meshv1alpha1.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}}}, true},
		"a Prometheus provider of another name": {&meshv1alpha1.MeshConfig{
			DefaultProviders:   &meshv1alpha1.MeshConfig_DefaultProviders{Metrics: []string{"mine"}},
			ExtensionProviders: []*meshv1alpha1.MeshConfig_ExtensionProvider{prom("mine")}}, true},
		"prometheus redefined as another kind": {&meshv1alpha1.MeshConfig{
			DefaultProviders: &meshv1alpha1.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}},
			ExtensionProviders: []*meshv1alpha1.MeshConfig_ExtensionProvider{{Name: "prometheus",
				Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Stackdriver{}}}}, false},
		"an unknown provider": {&meshv1alpha1.MeshConfig{
			DefaultProviders: &meshv1alpha1.MeshConfig_DefaultProviders{Metrics: []string{"nowhere"}}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := TelemetryFromMesh(tc.mc).Metrics; got != tc.metrics {
				t.Errorf("Metrics = %v, want %v", got, tc.metrics)
			}
		})
	}
}

func TestNewTelemetryRefusesAnOversizedFormat(t *testing.T) {
	_, err := NewTelemetry(TelemetryConfig{AccessLogFile: "/dev/stdout", AccessLogFormat: strings.Repeat("x", MaxAccessLogFormat+1)})
	if err == nil {
		t.Fatal("NewTelemetry took a format beyond the bound")
	}
}

func TestAccessLogFormats(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  TelemetryConfig
		want func(*fileaccesslog.FileAccessLog) bool
	}{
		"text default": {TelemetryConfig{AccessLogFile: "/dev/stdout"}, func(f *fileaccesslog.FileAccessLog) bool {
			return f.GetLogFormat().GetTextFormatSource().GetInlineString() == defaultTextFormat
		}},
		"own text gets its newline": {TelemetryConfig{AccessLogFile: "/x", AccessLogFormat: "%RESPONSE_CODE%"}, func(f *fileaccesslog.FileAccessLog) bool {
			return f.GetLogFormat().GetTextFormatSource().GetInlineString() == "%RESPONSE_CODE%\n" && f.GetPath() == "/x"
		}},
		"JSON default": {TelemetryConfig{AccessLogFile: "/dev/stdout", AccessLogJSON: true}, func(f *fileaccesslog.FileAccessLog) bool {
			return len(f.GetLogFormat().GetJsonFormat().GetFields()) == len(defaultJSONFormat)
		}},
		"JSON that does not parse gives the default": {TelemetryConfig{AccessLogFile: "/dev/stdout", AccessLogJSON: true, AccessLogFormat: "{"}, func(f *fileaccesslog.FileAccessLog) bool {
			return len(f.GetLogFormat().GetJsonFormat().GetFields()) == len(defaultJSONFormat)
		}},
		"own JSON": {TelemetryConfig{AccessLogFile: "/dev/stdout", AccessLogJSON: true, AccessLogFormat: `{"p":"%REQ_WITHOUT_QUERY(:PATH)%"}`}, func(f *fileaccesslog.FileAccessLog) bool {
			return len(f.GetLogFormat().GetJsonFormat().GetFields()) == 1 && len(f.GetLogFormat().GetFormatters()) == 1
		}},
	} {
		t.Run(name, func(t *testing.T) {
			tel, err := NewTelemetry(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(tel.accessLog) != 1 || len(tel.listenerLogs()) != 1 {
				t.Fatalf("access logs %d, listener logs %d; want 1 and 1", len(tel.accessLog), len(tel.listenerLogs()))
			}
			var f fileaccesslog.FileAccessLog
			if err := tel.accessLog[0].GetTypedConfig().UnmarshalTo(&f); err != nil {
				t.Fatal(err)
			}
			if !tc.want(&f) {
				t.Errorf("unexpected access log %v", &f)
			}
		})
	}
}
