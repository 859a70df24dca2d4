package envoygen

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	fileaccesslog "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
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
			logs := tel.class[sidecarInbound].accessLog
			if len(logs) != 1 || len(tel.listenerLogs(sidecarInbound)) != 1 {
				t.Fatalf("access logs %d, listener logs %d; want 1 and 1", len(logs), len(tel.listenerLogs(sidecarInbound)))
			}
			var f fileaccesslog.FileAccessLog
			if err := logs[0].GetTypedConfig().UnmarshalTo(&f); err != nil {
				t.Fatal(err)
			}
			if !tc.want(&f) {
				t.Errorf("unexpected access log %v", &f)
			}
		})
	}
}

// chainFilters describes the telemetry of one filter chain.
type chainTelemetry struct {
	network []string // network filter names
	http    []string // HTTP filter names of its connection manager
	logs    int      // access logs of its tcp_proxy or connection manager
}

func describeChain(t *testing.T, fc *listener.FilterChain) chainTelemetry {
	t.Helper()
	var out chainTelemetry
	for _, f := range fc.GetFilters() {
		out.network = append(out.network, f.GetName())
		switch f.GetName() {
		case tcpProxyFilterName:
			tp := &tcpproxy.TcpProxy{}
			if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatal(err)
			}
			out.logs = len(tp.GetAccessLog())
		case hcmFilterName:
			m := &hcm.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			for _, hf := range m.GetHttpFilters() {
				out.http = append(out.http, hf.GetName())
			}
			out.logs = len(m.GetAccessLog())
		}
	}
	return out
}

// TestTelemetryOnEveryChain: with metrics and an access log, every chain
// of a sidecar's listeners (those encoded directly included) carries
// istio.stats just before its terminal filter, the inbound ones the
// metadata exchange first, every connection manager the peer metadata
// filter first and istio.stats before the router, every chain but the
// loop guards an access log; the virtual listeners log connections no
// chain takes, and every outbound cluster runs the metadata exchange.
// Without metrics nor a log file, none of istio.stats and access logs is
// left.
func TestTelemetryOnEveryChain(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	for name, cfg := range map[string]TelemetryConfig{
		"metrics and JSON log": {Metrics: true, AccessLogFile: "/dev/stdout", AccessLogJSON: true},
		"neither":              {},
	} {
		t.Run(name, func(t *testing.T) {
			tel, err := NewTelemetry(cfg)
			if err != nil {
				t.Fatal(err)
			}
			g := &Generator{TrustDomain: td, Telemetry: tel}
			for _, p := range []*Proxy{
				{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}},
				{Namespace: "app", IPs: []string{"10.0.0.9"}},
			} {
				c := generate(t, g, snap, p)
				chains := 0
				for _, l := range c.listeners {
					wantListenerLogs := 0
					if cfg.AccessLogFile != "" && (l.Name == virtualInbound || l.Name == virtualOutbound) {
						wantListenerLogs = 1
					}
					if len(l.GetAccessLog()) != wantListenerLogs {
						t.Errorf("%s: %d listener access logs, want %d", l.Name, len(l.GetAccessLog()), wantListenerLogs)
					}
					all := slices.Clone(l.GetFilterChains())
					if l.GetDefaultFilterChain() != nil {
						all = append(all, l.GetDefaultFilterChain())
					}
					for _, fc := range all {
						chains++
						checkChainTelemetry(t, cfg, l.Name, fc, describeChain(t, fc))
					}
				}
				if chains < 10 {
					t.Fatalf("only %d chains checked", chains)
				}
				for name, cl := range c.clusters {
					mx := len(cl.GetFilters()) == 1 && cl.GetFilters()[0].GetName() == mxFilterName
					if want := strings.HasPrefix(name, "outbound|") || name == passthroughCluster; mx != want {
						t.Errorf("cluster %s: metadata exchange %v, want %v", name, mx, want)
					}
				}
			}
		})
	}
}

func checkChainTelemetry(t *testing.T, cfg TelemetryConfig, listenerName string, fc *listener.FilterChain, got chainTelemetry) {
	t.Helper()
	where := listenerName + " chain " + fc.GetName()
	inbound := listenerName == virtualInbound
	net := got.network
	if inbound {
		if len(net) == 0 || net[0] != mxFilterName {
			t.Errorf("%s: network filters %v do not begin with the metadata exchange", where, net)
			return
		}
	} else if slices.Contains(net, mxFilterName) {
		t.Errorf("%s: outbound network filters %v run the metadata exchange, which clusters do", where, net)
	}
	terminal := net[len(net)-1]
	if terminal == tcpProxyFilterName {
		stats := len(net) >= 2 && net[len(net)-2] == statsFilterName
		if stats != cfg.Metrics {
			t.Errorf("%s: network filters %v, istio.stats before tcp_proxy %v, want %v", where, net, stats, cfg.Metrics)
		}
	}
	if terminal == hcmFilterName {
		h := got.http
		if len(h) < 2 || h[0] != mxFilterName || h[len(h)-1] != routerFilterName {
			t.Errorf("%s: HTTP filters %v, want the metadata exchange first and the router last", where, h)
		} else if stats := h[len(h)-2] == statsFilterName; stats != cfg.Metrics {
			t.Errorf("%s: HTTP filters %v, istio.stats before the router %v, want %v", where, h, stats, cfg.Metrics)
		}
	}
	loopGuard := strings.HasSuffix(fc.GetName(), "-blackhole")
	if want := cfg.AccessLogFile != "" && !loopGuard; (got.logs == 1) != want || got.logs > 1 {
		t.Errorf("%s: %d access logs, want logging %v", where, got.logs, want)
	}
}

// TestTelemetryBytesDoNotChangeBetweenBuilds: the filters of equal
// configurations marshal to equal bytes, maps included (the JSON format,
// the metadata exchange's Struct), so a mesh config change elsewhere
// does not change every resource's version.
func TestTelemetryBytesDoNotChangeBetweenBuilds(t *testing.T) {
	cfg := TelemetryConfig{Metrics: true, AccessLogFile: "/dev/stdout", AccessLogJSON: true}
	var first *Telemetry
	for range 5 {
		tel, err := NewTelemetry(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = tel
			continue
		}
		if !slices.EqualFunc(tel.accessLogWire, first.accessLogWire, bytes.Equal) || !slices.EqualFunc(tel.outboundStatsWire, first.outboundStatsWire, bytes.Equal) {
			t.Error("access log bytes differ between builds")
		}
		for c := range telemetryClasses {
			if string(tel.httpMX[c].GetTypedConfig().GetValue()) != string(first.httpMX[c].GetTypedConfig().GetValue()) {
				t.Errorf("class %d: metadata exchange bytes differ between builds", c)
			}
		}
		if string(tel.tcpMX.GetTypedConfig().GetValue()) != string(first.tcpMX.GetTypedConfig().GetValue()) {
			t.Error("TCP metadata exchange bytes differ between builds")
		}
	}
}
