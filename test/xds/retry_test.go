package xds_test

import (
	"fmt"
	"testing"
	"time"
)

// TestProxylessDefaultRetries: gRPC-Go's own xDS client retries, on the
// default route (no VirtualService), a call its server fails with
// UNAVAILABLE, as Istio's default retry policy tells proxyless clients
// too: against a server failing every other call, every call succeeds.
// Without the retry policy half of them would fail.
func TestProxylessDefaultRetries(t *testing.T) {
	m := newMesh(t)
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	w := m.start("echo-1", "app", "echo", serverLabels, "-serve", addr, "-name", "echo-1", "-unavailable-every", "2")
	w.waitLine("mode SERVING", 30*time.Second)
	m.setModel("echo", service+"---"+workloadEntry("echo-1", port))
	client := m.start("client", "app", "client", map[string]string{"app": "client"}, "-target", target)
	client.eventually(t, "mTLS call", 30*time.Second, isOK("echo-1 "+clientID))
	allFrom(t, client, "calls to a server failing every other one", 20, isOK("echo-1 "+clientID))
}
