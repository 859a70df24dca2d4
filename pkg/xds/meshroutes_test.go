package xds

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// meshRouteProblems are VirtualServices bound to sidecars that they do not
// get as written: one with a regex Envoy behind pilot-agent would refuse
// (left out whole), one delegating to a VirtualService that does not
// exist (the rule left out), one with a tcp rule whose subnet an earlier
// rule chooses (Envoy would refuse the listener: the rule left out);
// one routing a host the first already routes (sidecars take the
// first); one for every host, "*" (left out whole); and one bound to a
// gateway alone, which is no sidecar's problem.
const meshRouteProblems = `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: lookahead, namespace: app}
spec:
  hosts: [web]
  http:
  - match: [{uri: {regex: "/(?=admin)"}}]
    route: [{destination: {host: web}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: lost-delegate, namespace: app}
spec:
  hosts: [web.example.com]
  http:
  - delegate: {name: nowhere}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tcp, namespace: app}
spec:
  hosts: [web]
  tcp:
  - match: [{destinationSubnets: [10.96.0.0/16]}]
    route: [{destination: {host: web, port: {number: 5432}}}]
  - match: [{destinationSubnets: [10.1.0.0/16, 10.96.0.0/16]}]
    route: [{destination: {host: web, port: {number: 80}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-again, namespace: app}
spec:
  hosts: [web.app.svc.cluster.local]
  http: [{route: [{destination: {host: web}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: everything, namespace: app}
spec:
  hosts: ["*"]
  tcp: [{route: [{destination: {host: web, port: {number: 5432}}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: gateway-only, namespace: app}
spec:
  hosts: [web]
  gateways: [ingress]
  http:
  - match: [{uri: {regex: "/(?=admin)"}}]
    route: [{destination: {host: web}}]
`

// TestVirtualServicesSidecarsLeaveOutAreCounted: each part of a
// VirtualService that sidecars leave out is counted in
// bulwark_policy_fail_closed (kind VirtualService), and no longer once
// it is gone.
func TestVirtualServicesSidecarsLeaveOutAreCounted(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests+meshRouteProblems), nil)
	gauge := func() float64 {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("VirtualService", "sidecar_routes_left_out"))
	}
	// The regex, the delegate, the tcp rule's subnet, and the host web routed
	// first by lookahead (first by name) that tcp and web-again name too.
	// And the VirtualService for every host.
	waitFor(t, "the problems of VirtualServices counted", func() bool { return gauge() == 6 })
	h.store.Publish(modeltest.Load(t, envoyManifests))
	waitFor(t, "the gauge emptied once they are gone", func() bool {
		return testutil.CollectAndCount(h.srv.metrics.failClosed) == 0
	})
}
