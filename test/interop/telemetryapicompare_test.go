package interop

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/prototext"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/core"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/util/protomarshal"

	bmodel "github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// telemetryAPICase is mesh config (Istio's installed one, changed by
// mesh) and Telemetries (YAML).
type telemetryAPICase struct {
	mesh        func(*meshconfig.MeshConfig)
	telemetries string
	// logged and stats say whether some access log and some istio.stats
	// are compared (so that a case cannot pass by comparing nothing);
	// want is text our listeners must hold, proof the case changed them.
	logged, stats bool
	want          []string
}

// telemetryYAML is a Telemetry of namespace with spec (YAML flow).
func telemetryYAML(namespace, name, spec string) string {
	return "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: " + name + ", namespace: " + namespace +
		"}\nspec: " + spec + "\n---\n"
}

// provider adds an extension provider to mesh config, written in YAML.
func provider(t *testing.T, m *meshconfig.MeshConfig, yaml string) {
	p := &meshconfig.MeshConfig_ExtensionProvider{}
	if err := protomarshal.ApplyYAMLStrict(yaml, p); err != nil {
		t.Fatalf("provider: %v", err)
	}
	m.ExtensionProviders = append(m.ExtensionProviders, p)
}

func telemetryAPICases(t *testing.T) map[string]telemetryAPICase {
	jsonProvider := func(m *meshconfig.MeshConfig) {
		provider(t, m, `{name: json-log, envoyFileAccessLog: {path: /dev/stdout, logFormat: {labels: {code: "%RESPONSE_CODE%", path: "%REQ_WITHOUT_QUERY(:PATH)%"}}}}`)
	}
	return map[string]telemetryAPICase{
		"mesh-wide access log by the envoy provider": {
			telemetries: telemetryYAML("istio-system", "mesh", "{accessLogging: [{providers: [{name: envoy}]}]}"),
			logged:      true, stats: true, want: []string{`path:"/dev/stdout"`},
		},
		"mesh-wide access log off, over accessLogFile": {
			mesh:        func(m *meshconfig.MeshConfig) { m.AccessLogFile = "/dev/stdout" },
			telemetries: telemetryYAML("istio-system", "mesh", "{accessLogging: [{providers: [{name: envoy}], disabled: true}]}"),
			stats:       true,
		},
		"namespace JSON access log of a provider": {
			mesh:        jsonProvider,
			telemetries: telemetryYAML("app", "logs", "{accessLogging: [{providers: [{name: json-log}]}]}"),
			logged:      true, stats: true, want: []string{"REQ_WITHOUT_QUERY", "envoy.formatter.req_without_query"},
		},
		"workload filter expression": {
			telemetries: telemetryYAML("app", "echo", "{selector: {matchLabels: {app: echo}}, accessLogging: [{providers: [{name: envoy}], filter: {expression: \"response.code >= 500\"}}]}"),
			logged:      true, stats: true, want: []string{"response.code >= 500", "envoy.access_loggers.extension_filters.cel"},
		},
		"client side logged, with mesh JSON encoding": {
			mesh:        func(m *meshconfig.MeshConfig) { m.AccessLogEncoding = meshconfig.MeshConfig_JSON },
			telemetries: telemetryYAML("istio-system", "mesh", "{accessLogging: [{match: {mode: CLIENT}, providers: [{name: envoy}]}]}"),
			logged:      true, stats: true, want: []string{"start_time"},
		},
		"server side logged, the namespace's filter over the mesh's": {
			mesh: jsonProvider,
			telemetries: telemetryYAML("istio-system", "mesh", "{accessLogging: [{providers: [{name: envoy}, {name: json-log}], filter: {expression: \"response.code >= 400\"}}]}") +
				telemetryYAML("app", "ns", "{accessLogging: [{match: {mode: SERVER}, providers: [{name: json-log}], filter: {expression: \"connection.mtls\"}}]}"),
			logged: true, stats: true, want: []string{"connection.mtls"},
		},
		"defaultProviders.accessLogging without Telemetries": {
			mesh:   func(m *meshconfig.MeshConfig) { m.DefaultProviders.AccessLogging = []string{"envoy"} },
			logged: true, stats: true,
		},
		"a text format provider, one workload disabled": {
			mesh: func(m *meshconfig.MeshConfig) {
				provider(t, m, `{name: file-log, envoyFileAccessLog: {path: /var/log/access.log, logFormat: {text: "%RESPONSE_CODE% %UPSTREAM_CLUSTER%"}}}`)
			},
			telemetries: telemetryYAML("istio-system", "mesh", "{accessLogging: [{providers: [{name: file-log}]}]}") +
				telemetryYAML("app", "sleep", "{selector: {matchLabels: {app: sleep}}, accessLogging: [{disabled: true}]}"),
			logged: true, stats: true, want: []string{"/var/log/access.log"},
		},
		"metrics off mesh-wide": {
			telemetries: telemetryYAML("istio-system", "mesh", "{metrics: [{providers: [{name: prometheus}], overrides: [{disabled: true}]}]}"),
		},
		"metrics off for clients in a namespace": {
			telemetries: telemetryYAML("app", "ns", "{metrics: [{overrides: [{match: {metric: ALL_METRICS, mode: CLIENT}, disabled: true}]}]}"),
			stats:       true,
		},
		"a namespace turning back on what the mesh turned off": {
			telemetries: telemetryYAML("istio-system", "mesh", "{metrics: [{overrides: [{disabled: true}]}]}") +
				telemetryYAML("app", "ns", "{metrics: [{overrides: [{match: {metric: REQUEST_COUNT}, disabled: false}]}]}"),
			stats: true, want: []string{`name:"requests_total"`},
		},
		"tags added and removed on a workload": {
			telemetries: telemetryYAML("app", "echo", "{selector: {matchLabels: {app: echo}}, metrics: [{overrides: [{match: {metric: REQUEST_COUNT}, tagOverrides: {request_host: {value: request.host}, request_protocol: {operation: REMOVE}}}, {match: {mode: SERVER}, tagOverrides: {source_cluster: {operation: REMOVE}}}]}]}"),
			stats:       true, want: []string{"request_host", "tags_to_remove"},
		},
		"a metric dropped on servers, a reporting interval": {
			telemetries: telemetryYAML("istio-system", "mesh", "{metrics: [{reportingInterval: 30s, overrides: [{match: {metric: REQUEST_DURATION, mode: SERVER}, disabled: true}, {match: {customMetric: my_metric}, tagOverrides: {a: {value: \"'x'\"}}}]}]}"),
			stats:       true, want: []string{"drop:true", "tcp_reporting_duration", "my_metric"},
		},
	}
}

// TestTelemetryAPIMatchesIstio compares, for Telemetries of the root
// namespace, of a namespace and of a workload, with mesh config's
// providers, the access logs and istio.stats filters Istio's generator
// gives every pod of the mesh with what ours gives it, chain by chain,
// inbound and outbound, as TestTelemetryFiltersMatchIstio does for mesh
// config alone.
func TestTelemetryAPIMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	cases := telemetryAPICases(t)
	if len(cases) < 10 {
		t.Fatalf("%d cases", len(cases))
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := mesh.DefaultMeshConfig()
			m.DefaultProviders = &meshconfig.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}}
			if tc.mesh != nil {
				tc.mesh(m)
			}
			sc := sidecarScenario{name: name, istio: tc.telemetries, pods: allPods}
			s := istioServerWithMesh(t, sc, m)
			snap := ourSnapshot(t, w.objects, tc.telemetries)
			if n := strings.Count(tc.telemetries, "kind: Telemetry"); len(snap.Telemetries()) != n {
				t.Fatalf("our model holds %d Telemetries, want %d", len(snap.Telemetries()), n)
			}
			tel, err := envoygen.NewTelemetry(envoygen.TelemetryFromMesh(m))
			if err != nil {
				t.Fatal(err)
			}
			g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain), Telemetry: tel}
			c := &telemetryComparison{t: t, counts: map[string]int{}}
			var text strings.Builder
			for _, key := range sc.pods {
				pod := w.pod(t, key)
				ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}})
				c.listeners(key, s.Listeners(istioProxy(s, pod)), ours.listeners)
				for _, l := range ours.listeners {
					text.WriteString(prototext.Format(l))
				}
			}
			t.Logf("compared: %v", c.counts)
			for _, kind := range []string{"inbound http", "inbound tcp", "outbound http", "outbound tcp"} {
				if c.counts[kind] < 2 {
					t.Errorf("only %d %s chains compared", c.counts[kind], kind)
				}
			}
			if got := c.counts["logged"] > 0; got != tc.logged {
				t.Errorf("access logs compared: %t, want %t", got, tc.logged)
			}
			if got := c.counts["istio.stats"] > 0; got != tc.stats {
				t.Errorf("istio.stats compared: %t, want %t", got, tc.stats)
			}
			flat := strings.Join(strings.Fields(text.String()), "")
			for _, want := range tc.want {
				if !strings.Contains(flat, strings.Join(strings.Fields(want), "")) {
					t.Errorf("our listeners do not hold %q", want)
				}
			}
		})
	}
}

// TestGatewayTelemetryAPIMatchesIstio is TestGatewayTelemetryFiltersMatchIstio
// with a Telemetry of the gateway's namespace selecting it: a client-side
// access log with a CEL filter and a tag override, which a router takes
// as a client (Istio's ListenerClassGateway).
func TestGatewayTelemetryAPIMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	servers := []*networkingv1.Server{{
		Port:  &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"},
		Hosts: []string{"*"},
	}}
	spec := &telemetryv1alpha1.Telemetry{}
	if err := protomarshal.ApplyYAMLStrict(`
selector: {matchLabels: `+gatewaySelectorYAML()+`}
accessLogging: [{match: {mode: CLIENT}, providers: [{name: envoy}], filter: {expression: "response.code >= 400"}}]
metrics: [{overrides: [{match: {metric: REQUEST_COUNT}, tagOverrides: {request_host: {value: request.host}}}]}]
`, spec); err != nil {
		t.Fatal(err)
	}
	m := mesh.DefaultMeshConfig()
	m.DefaultProviders = &meshconfig.MeshConfig_DefaultProviders{Metrics: []string{"prometheus"}}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cg := core.NewConfigGenTest(t, core.TestOptions{MeshConfig: m, Configs: []config.Config{{
		Meta: config.Meta{GroupVersionKind: gvk.Gateway, Name: "gateway", Namespace: gwNs, CreationTimestamp: base},
		Spec: &networkingv1.Gateway{Selector: gwLabels, Servers: servers},
	}, {
		Meta: config.Meta{GroupVersionKind: gvk.Telemetry, Name: "gw-logs", Namespace: gwNs, CreationTimestamp: base},
		Spec: spec,
	}}})
	cg.ConfigGen.MeshConfigChanged(m)
	t.Cleanup(func() { cg.ConfigGen.MeshConfigChanged(m) })
	proxy := cg.SetupProxy(&model.Proxy{
		Type: model.Router, ConfigNamespace: gwNs, Labels: gwLabels, ID: "gw.istio-system",
		Metadata: &model.NodeMetadata{Namespace: gwNs, Labels: gwLabels},
	})
	snap, _ := ourGatewayWorld(gwRouteCase{}, servers)
	res := *snap.Resources()
	res.Telemetries = []*bmodel.Telemetry{{Meta: bmodel.Meta{Name: "gw-logs", Namespace: gwNs}, Created: base, Spec: spec}}
	snap = bmodel.Build("2", bmodel.Options{}, res)
	tel, err := envoygen.NewTelemetry(envoygen.TelemetryFromMesh(m))
	if err != nil {
		t.Fatal(err)
	}
	g := &envoygen.Generator{TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain), Telemetry: tel}
	ours := ourResources(t, g, snap, &envoygen.Proxy{Router: true, Namespace: gwNs, Labels: gwLabels})
	c := &telemetryComparison{t: t, counts: map[string]int{}, class: "gateway"}
	c.listeners("gateway", cg.Listeners(proxy), ours.listeners)
	t.Logf("compared: %v", c.counts)
	if c.counts["gateway http"] != 1 || c.counts["istio.stats"] != 1 || c.counts["logged"] != 2 {
		t.Errorf("compared %v, want one HTTP chain with istio.stats, its log and the listener's", c.counts)
	}
	text := ""
	for _, l := range ours.listeners {
		text += prototext.Format(l)
	}
	for _, want := range []string{"response.code >= 400", "request_host"} {
		if !strings.Contains(text, want) {
			t.Errorf("our gateway listeners do not hold %q", want)
		}
	}
}

// gatewaySelectorYAML is gwLabels in YAML flow.
func gatewaySelectorYAML() string {
	var parts []string
	for k, v := range gwLabels {
		parts = append(parts, k+": "+v)
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ", ") + "}"
}
