package grpcgen

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

const canary = `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  subsets:
  - {name: stable, labels: {security.istio.io/tlsMode: istio}}
  - name: plain
    labels: {security.istio.io/tlsMode: istio}
    trafficPolicy: {tls: {mode: DISABLE}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  exportTo: ["."]
  http:
  - match: [{uri: {prefix: /svc.Echo/}, sourceLabels: {app: client}}]
    timeout: 3s
    route:
    - {destination: {host: echo, subset: stable}, weight: 90}
    - {destination: {host: echo, subset: plain}, weight: 10}
  - redirect: {uri: /elsewhere}
`

func TestVirtualServiceRoutesForGRPC(t *testing.T) {
	snap := load(t, canary)
	client := &Proxy{Namespace: "app", Labels: map[string]string{"app": "client"}}
	rc := build[*route.RouteConfiguration](t, snap, client, RouteType, "echo.app.svc.cluster.local:8080")
	rs := rc.GetVirtualHosts()[0].GetRoutes()
	if len(rs) != 2 {
		t.Fatalf("%d routes, want the VirtualService's two", len(rs))
	}
	a := rs[0].GetRoute()
	if got := a.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration().Seconds(); got != 3 {
		t.Errorf("max_stream_duration %vs, want the rule's timeout 3s", got)
	}
	var weights []string
	for _, c := range a.GetWeightedClusters().GetClusters() {
		weights = append(weights, c.GetName())
	}
	if !slices.Equal(weights, []string{"outbound|8080|stable|echo.app.svc.cluster.local", "outbound|8080|plain|echo.app.svc.cluster.local"}) {
		t.Errorf("weighted clusters %v", weights)
	}
	// Another client's labels miss the first rule.
	other := build[*route.RouteConfiguration](t, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "other"}}, RouteType, "echo.app.svc.cluster.local:8080")
	if n := len(other.GetVirtualHosts()[0].GetRoutes()); n != 1 {
		t.Errorf("a client without the source labels has %d routes, want the redirect alone", n)
	}
	// The VirtualService is private to app: a client elsewhere keeps the default route.
	elsewhere := build[*route.RouteConfiguration](t, snap, &Proxy{Namespace: "web", Labels: client.Labels}, RouteType, "echo.app.svc.cluster.local:8080")
	if got := elsewhere.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != "outbound|8080||echo.app.svc.cluster.local" {
		t.Errorf("a client of another namespace routes to %q", got)
	}

	// Subset clusters: mTLS by auto-mTLS, plaintext where the subset says DISABLE.
	if c := build[*cluster.Cluster](t, snap, client, ClusterType, "outbound|8080|stable|echo.app.svc.cluster.local"); c.GetTransportSocket() == nil {
		t.Error("subset stable without mTLS")
	}
	if c := build[*cluster.Cluster](t, snap, client, ClusterType, "outbound|8080|plain|echo.app.svc.cluster.local"); c.GetTransportSocket() != nil {
		t.Error("subset plain with TLS despite tls DISABLE")
	}
	cla := build[*endpoint.ClusterLoadAssignment](t, snap, client, EndpointType, "outbound|8080|stable|echo.app.svc.cluster.local")
	if n := len(cla.GetEndpoints()); n == 0 {
		t.Error("subset stable has no endpoints")
	}
	g := &Generator{TrustDomain: td}
	if rs := g.Generate(snap, client, ClusterType, []string{"outbound|8080|nosuch|echo.app.svc.cluster.local"}, false); len(rs) != 0 {
		t.Errorf("a subset no rule defines: %d clusters", len(rs))
	}

	vs := snap.Resources().VirtualServices[0]
	if got := UnsupportedInVirtualService(vs); !slices.Equal(got, []string{"spec.http[1].redirect: gRPC fails the calls it matches"}) {
		t.Errorf("unsupported %q", got)
	}
}
