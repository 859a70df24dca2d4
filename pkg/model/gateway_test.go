package model_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// TestGatewaysFor checks Istio's selection of a gateway pod's Gateways
// (pilot/pkg/model/push_context.go mergeGateways): a selector that is a
// subset of the pod's labels, of any namespace unless scoped; a nil or an
// empty selector selects every gateway pod; oldest first, then by name,
// then by namespace.
func TestGatewaysFor(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gw := func(ns, name string, age int, selector map[string]string) *model.Gateway {
		return &model.Gateway{
			Meta: model.Meta{Name: name, Namespace: ns}, Created: t0.Add(time.Duration(-age) * time.Hour),
			Spec: &networkingv1.Gateway{Selector: selector},
		}
	}
	ingress := map[string]string{"istio": "ingressgateway"}
	all := []*model.Gateway{
		gw("apps", "public", 1, ingress),
		gw("istio-system", "main", 3, ingress),
		gw("istio-system", "exact", 2, map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}),
		gw("istio-system", "other", 5, map[string]string{"istio": "egressgateway"}),
		gw("apps", "nil-selector", 0, nil),
		gw("team", "empty-selector", 0, map[string]string{}),
		gw("istio-system", "missing-label", 4, map[string]string{"istio": "ingressgateway", "zone": "a"}),
		// Same creation time as apps/public: by name, then namespace (and
		// empty-selector before nil-selector, by name).
		gw("zeta", "public", 1, ingress),
		gw("alpha", "public", 1, ingress),
	}
	slices.SortFunc(all, func(a, b *model.Gateway) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	snap := model.Build("1", model.Options{}, model.Resources{Gateways: all})
	names := func(gws []*model.Gateway) []string {
		var out []string
		for _, g := range gws {
			out = append(out, g.Namespace+"/"+g.Name)
		}
		return out
	}
	podLabels := map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway", "pod-template-hash": "x"}
	for name, tc := range map[string]struct {
		ns     string
		labels map[string]string
		scoped bool
		want   []string
	}{
		"the ingress pod gets every matching Gateway of any namespace, oldest first": {
			ns: "istio-system", labels: podLabels,
			want: []string{"istio-system/main", "istio-system/exact", "alpha/public", "apps/public", "zeta/public",
				"team/empty-selector", "apps/nil-selector"},
		},
		"scoped to its namespace, only its own namespace's": {
			ns: "istio-system", labels: podLabels, scoped: true,
			want: []string{"istio-system/main", "istio-system/exact"},
		},
		"a pod without labels gets only the Gateways without a selector": {
			ns: "apps", labels: nil,
			want: []string{"team/empty-selector", "apps/nil-selector"},
		},
		"scoped, a pod of apps without labels gets its namespace's selector-less one": {
			ns: "apps", labels: nil, scoped: true,
			want: []string{"apps/nil-selector"},
		},
		"an egress pod gets its own": {
			ns: "istio-system", labels: map[string]string{"istio": "egressgateway"},
			want: []string{"istio-system/other", "team/empty-selector", "apps/nil-selector"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := names(snap.GatewaysFor(tc.ns, tc.labels, tc.scoped)); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if got := len(snap.Gateways()); got != len(all) {
		t.Errorf("Gateways() has %d, want %d", got, len(all))
	}
}

const gatewayManifests = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: app, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  hosts: [web.example.com]
  gateways: [istio-system/ingress]
  http: [{route: [{destination: {host: web.app.svc.cluster.local}}]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: istio-system, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ["*/web.example.com"], tls: {mode: SIMPLE, credentialName: web-cert}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: app}
spec:
  hosts: [api.example.com]
  http: [{route: [{destination: {host: api}}]}]
`

func TestFileModelReadsGatewaysAndVirtualServices(t *testing.T) {
	snap := modeltest.Load(t, gatewayManifests)
	gws := snap.Gateways()
	if len(gws) != 1 || gws[0].Name != "ingress" || gws[0].Spec.GetServers()[0].GetTls().GetCredentialName() != "web-cert" ||
		!gws[0].Created.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("gateways %+v", gws)
	}
	vss := snap.VirtualServices()
	if len(vss) != 2 || vss[0].Name != "api" || vss[1].Name != "web" || !vss[0].Created.IsZero() ||
		vss[1].Spec.GetGateways()[0] != "istio-system/ingress" {
		t.Fatalf("virtual services %+v", vss)
	}
	if got := snap.GatewaysFor("istio-system", map[string]string{"istio": "ingressgateway"}, false); len(got) != 1 {
		t.Errorf("the ingress pod's gateways: %v", got)
	}
	for name, bad := range map[string]string{
		"an unknown Gateway field":        strings.Replace(gatewayManifests, "selector:", "selectr:", 1),
		"an unknown VirtualService field": strings.Replace(gatewayManifests, "hosts: [api.example.com]", "hostz: [api.example.com]", 1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(bad), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := model.LoadDir(dir, model.Options{}); err == nil {
				t.Error("loaded")
			}
		})
	}
}

// TestDiffGatewaysAndVirtualServicesAreConfig: a Gateway added, changed,
// recreated or removed is a config change, which pushes to every proxy;
// a VirtualService so changed is told by name (before and after), for the
// proxies that see it; neither is an endpoint change, which would push
// nothing to a gateway.
func TestDiffGatewaysAndVirtualServicesAreConfig(t *testing.T) {
	base := modeltest.Load(t, diffBase+"---"+gatewayManifests)
	for name, edit := range map[string]func(string) string{
		"a Gateway's server": func(s string) string {
			return strings.Replace(s, "credentialName: web-cert", "credentialName: other", 1)
		},
		"a Gateway's selector": func(s string) string {
			return strings.Replace(s, "selector: {istio: ingressgateway}", "selector: {istio: other}", 1)
		},
		"a Gateway recreated": func(s string) string {
			return strings.Replace(s, `creationTimestamp: "2026-01-01T00:00:00Z"`, `creationTimestamp: "2026-01-03T00:00:00Z"`, 1)
		},
		"a VirtualService's route": func(s string) string {
			return strings.Replace(s, "host: web.app.svc.cluster.local", "host: echo.app.svc.cluster.local", 1)
		},
		"a VirtualService removed": func(s string) string { return s[:strings.LastIndex(s, "---")] },
		"a VirtualService added": func(s string) string {
			return s + "---\n" + strings.Replace(gatewayManifests[strings.LastIndex(gatewayManifests, "---")+3:], "name: api", "name: api2", 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			next := edit(diffBase + "---" + gatewayManifests)
			if next == diffBase+"---"+gatewayManifests {
				t.Fatal("the edit changed nothing")
			}
			d := model.Diff(base, modeltest.Load(t, next))
			if vs := strings.HasPrefix(name, "a VirtualService"); d.Config == vs || (len(d.VirtualServices) > 0) != vs {
				t.Errorf("config %t, virtual services %d: %+v", d.Config, len(d.VirtualServices), d)
			}
		})
	}
	if d := model.Diff(base, modeltest.Load(t, diffBase+"---"+gatewayManifests)); !d.None() {
		t.Errorf("the same manifests differ: %+v", d)
	}
}
