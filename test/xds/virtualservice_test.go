package xds_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// versionedEntry is workloadEntry with a version label, which the
// DestinationRule's subsets select.
func versionedEntry(name, version string, port int) string {
	return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: app}
spec:
  address: 127.0.0.1
  labels: {app: echo, version: %s, security.istio.io/tlsMode: istio}
  serviceAccount: echo
  ports: {grpc: %d}
`, name, version, port)
}

const echoSubsets = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`

// allFrom makes n calls and fails unless each satisfies ok.
func allFrom(t *testing.T, w *workload, what string, n int, ok func(string) bool) {
	t.Helper()
	for range n {
		if l := w.call(t); !ok(l) {
			t.Fatalf("%s: a call gave %q", what, l)
		}
	}
}

// TestProxylessVirtualServices: gRPC-Go's own xDS client follows a
// VirtualService bound to mesh — weighted subsets of a DestinationRule, a
// path match, fault injection — and the default route again once it is
// gone.
func TestProxylessVirtualServices(t *testing.T) {
	m := newMesh(t)
	_, port1 := m.startServer("echo-1")
	_, port2 := m.startServer("echo-2")
	m.setModel("echo", service+"---"+versionedEntry("echo-1", "v1", port1)+"---"+versionedEntry("echo-2", "v2", port2)+"---"+echoSubsets)
	client := m.start("client", "app", "client", map[string]string{"app": "client"}, "-target", target)
	client.eventually(t, "mTLS call", 30*time.Second, func(l string) bool { return strings.HasPrefix(l, "ok echo-") })

	t.Run("a weighted route sends every call to the subset with all the weight", func(t *testing.T) {
		rds := m.acked("client", grpcgen.RouteType)
		m.setModel("vs", `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - route:
    - {destination: {host: echo, subset: v1}, weight: 0}
    - {destination: {host: echo, subset: v2}, weight: 100}
`)
		m.waitAckedChange(t, "client", grpcgen.RouteType, rds)
		// gRPC acknowledges routes before its channel uses them, and the
		// default route before them balances round robin over both
		// subsets: one call reaching v2 may still be the old route's, but
		// not three in a row.
		inRow := 0
		client.eventually(t, "three calls in a row reaching v2", 10*time.Second, func(l string) bool {
			inRow++
			if !isOK("echo-2 " + clientID)(l) {
				inRow = 0
			}
			return inRow == 3
		})
		allFrom(t, client, "calls after the split", 20, isOK("echo-2 "+clientID))
	})

	t.Run("a path match routes the service's method to another subset", func(t *testing.T) {
		rds := m.acked("client", grpcgen.RouteType)
		m.setModel("vs", `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{uri: {prefix: /bulwark.test.Echo/}}]
    timeout: 5s
    route: [{destination: {host: echo, subset: v1}}]
  - route: [{destination: {host: echo, subset: v2}}]
`)
		m.waitAckedChange(t, "client", grpcgen.RouteType, rds)
		client.eventually(t, "a call reaching v1", 10*time.Second, isOK("echo-1 "+clientID))
		allFrom(t, client, "calls matching the prefix", 20, isOK("echo-1 "+clientID))
	})

	t.Run("an abort fault fails every call", func(t *testing.T) {
		rds := m.acked("client", grpcgen.RouteType)
		m.setModel("vs", `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - fault: {abort: {httpStatus: 503, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
`)
		m.waitAckedChange(t, "client", grpcgen.RouteType, rds)
		client.eventually(t, "an aborted call", 10*time.Second, isCode(codes.Unavailable))
		allFrom(t, client, "calls under the fault", 10, isCode(codes.Unavailable))
	})

	t.Run("without the VirtualService both endpoints serve again", func(t *testing.T) {
		rds := m.acked("client", grpcgen.RouteType)
		m.setModel("vs", "")
		m.waitAckedChange(t, "client", grpcgen.RouteType, rds)
		client.eventually(t, "a call reaching v1", 10*time.Second, isOK("echo-1 "+clientID))
		client.eventually(t, "a call reaching v2", 10*time.Second, isOK("echo-2 "+clientID))
	})
}
