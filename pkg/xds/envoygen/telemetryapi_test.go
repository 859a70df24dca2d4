package envoygen

import (
	"slices"
	"strings"
	"testing"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// The agreement of the Telemetry API's filters and access logs with
// Istio's generator is tested in test/interop
// (TestTelemetryAPIMatchesIstio); these cases check what is Bulwark's
// own: sharing, keys, refusal and notes.

const telemetries = `
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: echo, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  accessLogging: [{providers: [{name: envoy}], filter: {expression: "response.code >= 500"}}]
  metrics: [{overrides: [{match: {metric: REQUEST_COUNT}, tagOverrides: {request_host: {value: request.host}}}]}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: broken, namespace: app}
spec:
  selector: {matchLabels: {app: sleep}}
  accessLogging: [{providers: [{name: envoy}], filter: {expression: "response.code >="}}]
`

// TestTelemetryScopes: a workload a Telemetry selects gets its access log
// filter and tag override, valid for Envoy, on listeners whose keys name
// its scope; another keeps the mesh config's listeners and keys; a
// Telemetry validation refuses applies to nobody; equal scopes share one
// Telemetry.
func TestTelemetryScopes(t *testing.T) {
	snap := modeltest.Load(t, manifests+"---\n"+telemetries)
	tel, err := NewTelemetry(TelemetryConfig{Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	g := &Generator{TrustDomain: td, Telemetry: tel}
	echo := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}}
	sleep := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}}

	if g.TelemetryFor(snap, "app", sleep.Labels) != tel {
		t.Error("the sleep workload, selected by a refused Telemetry only, does not keep the mesh config's telemetry")
	}
	et := g.TelemetryFor(snap, "app", echo.Labels)
	if et == tel || et.Key() == "" || g.TelemetryFor(snap, "app", echo.Labels) != et {
		t.Fatal("the echo workload's telemetry is the mesh config's, or not shared")
	}
	keys := func(p *Proxy) map[string]string {
		out := map[string]string{}
		for _, r := range g.Generate(snap, p, resource.ListenerType, nil, true) {
			out[r.Name] = r.Key
		}
		return out
	}
	ek, sk := keys(echo), keys(sleep)
	for _, name := range []string{virtualInbound, virtualOutbound} {
		if !strings.Contains(ek[name], et.Key()) || strings.Contains(sk[name], "tel:") {
			t.Errorf("%s: keys %q and %q do not tell the scopes apart", name, ek[name], sk[name])
		}
	}
	c := generate(t, g, snap, echo) // Envoy's validation of every resource
	text := ""
	for _, l := range c.listeners {
		text += l.String()
	}
	for _, want := range []string{"response.code >= 500", "request_host"} {
		if !strings.Contains(text, want) {
			t.Errorf("echo's listeners do not hold %q", want)
		}
	}
	c = generate(t, g, snap, sleep)
	for _, l := range c.listeners {
		if s := l.String(); strings.Contains(s, "response.code") || strings.Contains(s, "request_host") {
			t.Fatalf("sleep's listener %s holds another workload's telemetry", l.Name)
		}
	}
}

// TestTelemetryNotes: providers the mesh config does not define, or of
// types not generated, are noted, and log nothing.
func TestTelemetryNotes(t *testing.T) {
	mc := &meshv1alpha1.MeshConfig{
		DefaultProviders: &meshv1alpha1.MeshConfig_DefaultProviders{Metrics: []string{"prometheus", "nowhere"}, AccessLogging: []string{"otel"}},
		ExtensionProviders: []*meshv1alpha1.MeshConfig_ExtensionProvider{{Name: "otel", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOtelAls{
			EnvoyOtelAls: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyOpenTelemetryLogProvider{Service: "otel.svc", Port: 4317},
		}}},
		AccessLogFile: "/dev/stdout",
	}
	tel, err := NewTelemetry(TelemetryFromMesh(mc))
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(tel.Notes(), "\n")
	for _, want := range []string{`metrics provider "nowhere" is not among`, `access log provider "otel" (EnvoyOtelAls) is not generated`} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q, want %q", notes, want)
		}
	}
	// The OpenTelemetry provider configures logging, as in Istio: mesh
	// config's file does not apply in its stead.
	if n := len(tel.class[sidecarInbound].accessLog); n != 0 {
		t.Errorf("%d access logs, want none", n)
	}
	if !tel.Metrics() || len(tel.class[sidecarInbound].httpStats) != 1 {
		t.Error("the prometheus provider's istio.stats is missing")
	}
	if !slices.Contains(TelemetryFromMesh(mc).DefaultAccessLogging, "otel") {
		t.Error("TelemetryFromMesh lost defaultProviders.accessLogging")
	}
}
