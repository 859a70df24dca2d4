package envoygen

import (
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// routeConfig returns p's route configuration name, decoded.
func routeConfig(t *testing.T, g *Generator, yaml string, p *Proxy, name string) (*route.RouteConfiguration, string) {
	t.Helper()
	snap := modeltest.Load(t, yaml)
	for _, r := range g.Generate(snap, p, resource.RouteType, nil, true) {
		if r.Name != name {
			continue
		}
		msg, err := r.Message(resource.RouteType)
		if err != nil {
			t.Fatal(err)
		}
		rc := msg.(*route.RouteConfiguration)
		if err := rc.ValidateAll(); err != nil {
			t.Fatalf("route %s invalid: %v", name, err)
		}
		return rc, r.Key
	}
	t.Fatalf("no route %s", name)
	return nil, ""
}

func vhostNamed(t *testing.T, rc *route.RouteConfiguration, name string) *route.VirtualHost {
	t.Helper()
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == name {
			return vh
		}
	}
	t.Fatalf("route %s has no virtual host %s", rc.GetName(), name)
	return nil
}

// The default route, encoded field by field, is routes.DefaultRoute.
func TestDefaultRouteIsTheTranslations(t *testing.T) {
	const hashed = manifests + `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
`
	p := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}}
	for name, c := range map[string]struct {
		mesh routes.Options
		yaml string
	}{
		"Istio's defaults":                    {yaml: manifests},
		"the mesh's retry policy":             {mesh: routes.Options{DefaultRetry: &networkingv1.HTTPRetry{Attempts: 5, RetryOn: "5xx,503", PerTryTimeout: durationpb.New(2e9)}}, yaml: manifests},
		"retries off by the mesh":             {mesh: routes.Options{DefaultRetry: &networkingv1.HTTPRetry{Attempts: 0}}, yaml: manifests},
		"a DestinationRule's consistent hash": {yaml: hashed},
	} {
		t.Run(name, func(t *testing.T) {
			g := &Generator{TrustDomain: td, Mesh: Mesh{Routes: c.mesh}}
			rc, _ := routeConfig(t, g, c.yaml, p, "80")
			vh := vhostNamed(t, rc, "echo.app.svc.cluster.local:80")
			want := c.mesh.DefaultRoute(modeltest.Load(t, c.yaml), "echo.app.svc.cluster.local", 80, routes.Proxy{Namespace: "app", Labels: p.Labels})
			if len(vh.GetRoutes()) != 1 {
				t.Fatalf("%d routes", len(vh.GetRoutes()))
			}
			if diff := cmp.Diff(want, vh.GetRoutes()[0], protocmp.Transform()); diff != "" {
				t.Errorf("default route (-translation +encoded):\n%s", diff)
			}
			if got := vh.GetRoutes()[0].GetRoute().GetRetryPolicy(); (got == nil) != (c.mesh.DefaultRetry != nil && c.mesh.DefaultRetry.Attempts == 0) {
				t.Errorf("retry policy %v", got)
			}
			if hashed := len(vh.GetRoutes()[0].GetRoute().GetHashPolicy()) == 1; hashed != (c.yaml != manifests) {
				t.Errorf("hash policy %v", vh.GetRoutes()[0].GetRoute().GetHashPolicy())
			}
			if !vh.GetIncludeRequestAttemptCount() {
				t.Error("include_request_attempt_count unset")
			}
		})
	}
}

const routedMesh = manifests + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{sourceLabels: {app: sleep}}]
    route: [{destination: {host: other.web.svc.cluster.local}}]
  - route: [{destination: {host: echo}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: private, namespace: web}
spec:
  hosts: [other]
  exportTo: ["."]
  http:
  - route: [{destination: {host: echo.app.svc.cluster.local}}]
`

// A VirtualService replaces its host's default route for the proxies
// that see it, by their labels and namespace, and the routes' keys tell
// those proxies apart.
func TestVirtualServicesReplaceDefaultRoutes(t *testing.T) {
	g := &Generator{TrustDomain: td}
	sleep := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}}
	client := &Proxy{Namespace: "app", Labels: map[string]string{"app": "client"}}
	web := &Proxy{Namespace: "web", Labels: map[string]string{"app": "sleep"}}
	clusterOf := func(p *Proxy, vhost string) (string, string) {
		rc, key := routeConfig(t, g, routedMesh, p, "80")
		return vhostNamed(t, rc, vhost).GetRoutes()[0].GetRoute().GetCluster(), key
	}
	got, sleepKey := clusterOf(sleep, "echo.app.svc.cluster.local:80")
	if got != "outbound|80||other.web.svc.cluster.local" {
		t.Errorf("sleep's echo route goes to %s", got)
	}
	got, clientKey := clusterOf(client, "echo.app.svc.cluster.local:80")
	if got != "outbound|80||echo.app.svc.cluster.local" {
		t.Errorf("client's echo route goes to %s", got)
	}
	if sleepKey == clientKey {
		t.Error("proxies with different labels share a route key though a VirtualService selects by labels")
	}
	// The private VirtualService of web applies in web alone.
	if got, _ := clusterOf(web, "other.web.svc.cluster.local:80"); got != "outbound|80||echo.app.svc.cluster.local" {
		t.Errorf("web's other route goes to %s", got)
	}
	if got, _ := clusterOf(sleep, "other.web.svc.cluster.local:80"); got != "outbound|80||other.web.svc.cluster.local" {
		t.Errorf("app's other route goes to %s (the VirtualService is private to web)", got)
	}
}
