package grpcgen

import (
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// TestDefaultRouteRetries: the route of a service no VirtualService
// claims carries Istio's default retry policy, the mesh's when it sets
// one, none when the mesh's has no attempts; no timeout; and the
// client's DestinationRule's consistent hash.
func TestDefaultRouteRetries(t *testing.T) {
	const name = "echo.app.svc.cluster.local:8080"
	for label, tc := range map[string]struct {
		retry    *networkingv1.HTTPRetry
		attempts uint32 // 0: no retry policy
		on       string
	}{
		"Istio's default":           {attempts: 2, on: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"},
		"the mesh's":                {retry: &networkingv1.HTTPRetry{Attempts: 4, RetryOn: "unavailable"}, attempts: 4, on: "unavailable"},
		"none when the mesh sets 0": {retry: &networkingv1.HTTPRetry{Attempts: 0}},
	} {
		t.Run(label, func(t *testing.T) {
			snap := load(t, "")
			g := &Generator{TrustDomain: td, Routes: routes.Options{DefaultRetry: tc.retry}}
			rs := g.Generate(snap, client, RouteType, []string{name}, false)
			if len(rs) != 1 {
				t.Fatalf("%d route configurations", len(rs))
			}
			m, err := rs[0].Message(RouteType)
			if err != nil {
				t.Fatal(err)
			}
			rc := m.(*route.RouteConfiguration)
			if err := rc.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			a := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
			rp := a.GetRetryPolicy()
			if got := rp.GetNumRetries().GetValue(); got != tc.attempts || rp.GetRetryOn() != tc.on || (tc.attempts == 0) != (rp == nil) {
				t.Errorf("retry policy %v; want %d attempts on %q", rp, tc.attempts, tc.on)
			}
			if a.GetTimeout().AsDuration() != 0 || a.GetCluster() != "outbound|8080||echo.app.svc.cluster.local" {
				t.Errorf("timeout %v, cluster %s", a.GetTimeout(), a.GetCluster())
			}
		})
	}
}

// TestDefaultRouteHash: a client's DestinationRule's consistent hash is
// on its default route, and the route's key is the client namespace's.
func TestDefaultRouteHash(t *testing.T) {
	snap := load(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  exportTo: ["."]
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
`)
	g := &Generator{TrustDomain: td}
	const name = "echo.app.svc.cluster.local:8080"
	mine := g.Generate(snap, client, RouteType, []string{name}, false)
	other := g.Generate(snap, &Proxy{Namespace: "web"}, RouteType, []string{name}, false)
	if len(mine) != 1 || len(other) != 1 {
		t.Fatalf("%d and %d route configurations", len(mine), len(other))
	}
	if mine[0].Key == other[0].Key {
		t.Errorf("clients of two namespaces share the route key %q, one with a hash policy", mine[0].Key)
	}
	m, err := mine[0].Message(RouteType)
	if err != nil {
		t.Fatal(err)
	}
	hp := m.(*route.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy()
	if len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-user" {
		t.Errorf("hash policy %v", hp)
	}
}
