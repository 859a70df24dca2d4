package model_test

import (
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

const telemetries = `
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-new, namespace: istio-system, creationTimestamp: "2026-01-02T00:00:00Z"}
spec: {accessLogging: [{providers: [{name: envoy}]}]}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-old, namespace: istio-system, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {metrics: [{providers: [{name: prometheus}]}]}
---
apiVersion: telemetry.istio.io/v1alpha1
kind: Telemetry
metadata: {name: ns, namespace: shop}
spec: {accessLogging: [{disabled: true}]}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: cart, namespace: shop}
spec: {selector: {matchLabels: {app: cart}}, accessLogging: [{filter: {expression: "response.code >= 500"}}]}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: gateway, namespace: shop}
spec: {targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: gw}]}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: root-selected, namespace: istio-system}
spec: {selector: {matchLabels: {app: cart}}}
`

// TestTelemetriesForSelectsAsIstio: the oldest namespace-wide Telemetry of
// the root namespace, then of the proxy's namespace, then those of its
// namespace whose selector matches the workload; one attached by
// targetRefs, or selecting workloads of the root namespace, configures no
// sidecar of another namespace.
func TestTelemetriesForSelectsAsIstio(t *testing.T) {
	snap := modeltest.Load(t, telemetries)
	names := func(sc model.TelemetryScope) []string {
		var out []string
		for _, tel := range sc.All() {
			out = append(out, tel.Namespace+"/"+tel.Name)
		}
		return out
	}
	for name, tc := range map[string]struct {
		ns     string
		labels map[string]string
		keep   func(*model.Telemetry) bool
		want   []string
	}{
		"a workload selected":           {ns: "shop", labels: map[string]string{"app": "cart"}, want: []string{"istio-system/mesh-old", "shop/ns", "shop/cart"}},
		"another workload":              {ns: "shop", labels: map[string]string{"app": "web"}, want: []string{"istio-system/mesh-old", "shop/ns"}},
		"a namespace without its own":   {ns: "other", labels: map[string]string{"app": "cart"}, want: []string{"istio-system/mesh-old"}},
		"the root namespace's workload": {ns: "istio-system", labels: map[string]string{"app": "cart"}, want: []string{"istio-system/mesh-old", "istio-system/root-selected"}},
		"the oldest refused": {ns: "other", want: []string{"istio-system/mesh-new"},
			keep: func(t *model.Telemetry) bool { return t.Name != "mesh-old" }},
	} {
		t.Run(name, func(t *testing.T) {
			sc := snap.TelemetriesFor(tc.ns, tc.labels, tc.keep)
			got := names(sc)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
			if sc.Key() == "" {
				t.Error("a scope with Telemetries has an empty key")
			}
		})
	}
	if sc := snap.WithRootNamespace("elsewhere").TelemetriesFor("other", nil, nil); !sc.Empty() || sc.Key() != "" {
		t.Errorf("another root namespace: %v", names(sc))
	}
}
