package xds_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// otherID is the second client's identity.
const otherID = "spiffe://cluster.local/ns/app/sa/other"

// TestProxylessSidecarScoping: gRPC-Go's own xDS client reads the
// Sidecar that selects its workload, as Istio's proxyless generator
// scopes it: a service the Sidecar hides cannot be called (its listener
// is absent) while a client the Sidecar does not select keeps calling
// it; a VirtualService the Sidecar does not import does not apply to the
// client it selects, and still applies to the other.
func TestProxylessSidecarScoping(t *testing.T) {
	m := newMesh(t)
	_, port := m.startServer("echo-1")
	m.setModel("echo", service+"---"+workloadEntry("echo-1", port))
	client := m.start("client", "app", "client", map[string]string{"app": "client"}, "-target", target)
	client.eventually(t, "mTLS call", 30*time.Second, isOK("echo-1 "+clientID))
	other := m.start("other", "app", "other", map[string]string{"app": "other"}, "-target", target)
	other.eventually(t, "mTLS call of the other client", 30*time.Second, isOK("echo-1 "+otherID))
	failed := func(l string) bool { return strings.HasPrefix(l, "err ") }

	t.Run("a Sidecar hiding the service fails the calls of the client it selects", func(t *testing.T) {
		m.setModel("sidecar", sidecarFor("client", `"istio-system/*"`))
		res, d := client.eventually(t, "a call failing", 30*time.Second, failed)
		t.Logf("after the Sidecar: %q within %s", res, d)
		allFrom(t, client, "calls while the Sidecar hides echo", 5, failed)
		allFrom(t, other, "calls of the client the Sidecar does not select", 10, isOK("echo-1 "+otherID))
		m.setModel("sidecar", "")
		client.eventually(t, "a call once the Sidecar is gone", 30*time.Second, isOK("echo-1 "+clientID))
	})

	t.Run("a VirtualService the Sidecar does not import does not apply", func(t *testing.T) {
		// A VirtualService of namespace routes aborting every call to
		// echo: the Sidecar's "./*" imports app's VirtualServices alone.
		m.setModel("vs", `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: abort-echo, namespace: routes}
spec:
  hosts: [echo.app.svc.cluster.local]
  http:
  - fault: {abort: {httpStatus: 503, percentage: {value: 100}}}
    route: [{destination: {host: echo.app.svc.cluster.local}}]
`)
		client.eventually(t, "an aborted call", 30*time.Second, isCode(codes.Unavailable))
		other.eventually(t, "an aborted call of the other client", 30*time.Second, isCode(codes.Unavailable))
		m.setModel("sidecar", sidecarFor("client", `"./*"`))
		client.eventually(t, "a call past the VirtualService the Sidecar does not import", 30*time.Second, isOK("echo-1 "+clientID))
		allFrom(t, client, "calls under the Sidecar", 10, isOK("echo-1 "+clientID))
		allFrom(t, other, "calls of the client the Sidecar does not select", 10, isCode(codes.Unavailable))
		m.setModel("vs", "")
		m.setModel("sidecar", "")
	})
}

// sidecarFor is a Sidecar of namespace app selecting the workloads
// labelled app: <app>, importing hosts.
func sidecarFor(app, hosts string) string {
	return `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: ` + app + `, namespace: app}
spec:
  workloadSelector: {labels: {app: ` + app + `}}
  egress: [{hosts: [` + hosts + `]}]
`
}
