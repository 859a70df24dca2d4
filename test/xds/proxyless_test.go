package xds_test

import (
	"context"
	"fmt"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/bulwark-mesh/bulwark/test/xds/echo"
)

const (
	target   = "xds:///echo.app.svc.cluster.local:8080"
	clientID = "spiffe://cluster.local/ns/app/sa/client"
)

var serverLabels = map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"}

const service = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 8080}]
`

func workloadEntry(name string, port int) string {
	return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: app}
spec:
  address: 127.0.0.1
  labels: {app: echo, security.istio.io/tlsMode: istio}
  serviceAccount: echo
  ports: {grpc: %d}
`, name, port)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer runs an echo server on a free port and waits until xDS has
// configured it.
func (m *mesh) startServer(name string) (addr string, port int) {
	m.t.Helper()
	port = freePort(m.t)
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	w := m.start(name, "app", "echo", serverLabels, "-serve", addr, "-name", name)
	w.waitLine("mode SERVING", 30*time.Second)
	return addr, port
}

// plaintextCall calls addr directly without TLS.
func plaintextCall(t *testing.T, addr string) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, _, err = echo.Call(ctx, conn)
	return err
}

func isOK(from string) func(string) bool {
	return func(l string) bool { return l == "ok "+from }
}

func isCode(c codes.Code) func(string) bool {
	return func(l string) bool { return strings.HasPrefix(l, "err "+c.String()+" ") }
}

func TestProxylessGRPC(t *testing.T) {
	m := newMesh(t)
	addr1, port1 := m.startServer("echo-1")
	m.setModel("echo", service+"---"+workloadEntry("echo-1", port1))
	client := m.start("client", "app", "client", map[string]string{"app": "client"}, "-target", target)

	res, d := client.eventually(t, "mTLS call", 30*time.Second, isOK("echo-1 "+clientID))
	t.Logf("first call %q after %s", res, d)

	t.Run("under STRICT a plaintext client fails", func(t *testing.T) {
		m.setModel("pa", peerAuthentication("DISABLE"))
		waitPlaintext(t, addr1, func(err error) bool { return err == nil })
		m.setModel("pa", peerAuthentication("STRICT"))
		waitPlaintext(t, addr1, func(err error) bool { return status.Code(err) == codes.Unavailable })
		client.eventually(t, "mTLS call under STRICT", 10*time.Second, isOK("echo-1 "+clientID))
		m.setModel("pa", "")
	})

	t.Run("a DENY on the client's service account fails the call until removed", func(t *testing.T) {
		m.setModel("authz", `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-client, namespace: app}
spec:
  action: DENY
  rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/client]}}]}]
`)
		client.eventually(t, "denied call", 10*time.Second, isCode(codes.PermissionDenied))
		m.setModel("authz", "")
		client.eventually(t, "call after removal", 10*time.Second, isOK("echo-1 "+clientID))
	})

	t.Run("a DENY on an identity also stops plaintext callers", func(t *testing.T) {
		m.setModel("pa", peerAuthentication("DISABLE"))
		waitPlaintext(t, addr1, func(err error) bool { return err == nil })
		m.setModel("authz", `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-client, namespace: app}
spec:
  action: DENY
  rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/client]}}]}]
`)
		waitPlaintext(t, addr1, func(err error) bool { return status.Code(err) == codes.PermissionDenied })
		m.setModel("authz", "")
		m.setModel("pa", "")
		client.eventually(t, "mTLS call restored", 10*time.Second, isOK("echo-1 "+clientID))
	})

	t.Run("a second endpoint receives traffic within a second", func(t *testing.T) {
		_, port2 := m.startServer("echo-2")
		m.setModel("echo", service+"---"+workloadEntry("echo-1", port1)+"---"+workloadEntry("echo-2", port2))
		res, d := client.eventually(t, "call reaching echo-2", 10*time.Second, isOK("echo-2 "+clientID))
		t.Logf("%q after %s", res, d)
		if d > time.Second {
			t.Errorf("echo-2 reached after %s, want within 1s", d)
		}
	})

	t.Run("a DestinationRule DISABLE switches the client to plaintext", func(t *testing.T) {
		cds := m.acked("client", grpcgen.ClusterType)
		m.setModel("dr", `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec: {host: echo, trafficPolicy: {tls: {mode: DISABLE}}}
`)
		// gRPC applies a cluster's security settings to new connections: once
		// the client has the plaintext cluster, a listener change (an
		// allow-all policy) makes the servers drain the old connections.
		// They still demand mTLS, so the plaintext client fails…
		m.waitAckedChange(t, "client", grpcgen.ClusterType, cds)
		m.setModel("authz", `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-all, namespace: app}
spec: {rules: [{}]}
`)
		client.eventually(t, "plaintext call to mTLS servers", 10*time.Second, isCode(codes.Unavailable))
		// …and succeeds, seen as anonymous, once they accept plaintext.
		m.setModel("pa", peerAuthentication("DISABLE"))
		client.eventually(t, "plaintext call", 10*time.Second, func(l string) bool {
			return strings.HasPrefix(l, "ok echo-") && strings.HasSuffix(l, " "+echo.NoIdentity)
		})
		m.setModel("dr", "")
		m.setModel("pa", "")
		m.setModel("authz", "")
		client.eventually(t, "mTLS again", 10*time.Second, func(l string) bool {
			return strings.HasPrefix(l, "ok echo-") && strings.HasSuffix(l, " "+clientID)
		})
	})
}

func waitPlaintext(t *testing.T, addr string, ok func(error) bool) {
	t.Helper()
	var err error
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if err = plaintextCall(t, addr); ok(err) {
			return
		}
	}
	t.Fatalf("plaintext call to %s: last result %v", addr, err)
}

func peerAuthentication(mode string) string {
	return `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec: {mtls: {mode: ` + mode + `}}
`
}
