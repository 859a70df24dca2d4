package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a buffer istiod's logger may write to from any
// goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestIstioSettingsNotReadAreReported: `istiod discovery` given Istio's
// multi-cluster variables it does not read logs one warning for each,
// saying what it does instead, and shows each as
// bulwark_ignored_setting{name} 1 on /metrics; a variable set to the
// value that asks for what istiod does anyway, or not set, is neither.
func TestIstioSettingsNotReadAreReported(t *testing.T) {
	env := map[string]string{
		"PILOT_ENABLE_REMOTE_CREDENTIALS_CONTROLLER": "false",
		"PILOT_MULTICLUSTER_KUBECONFIG_PATH":         "/etc/istio/kubeconfigs",
		"RESOLVE_HOSTNAME_GATEWAYS":                  "true",
		"PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API":   "false", // what istiod does
	}
	reported := []string{"PILOT_ENABLE_REMOTE_CREDENTIALS_CONTROLLER", "PILOT_MULTICLUSTER_KUBECONFIG_PATH", "RESOLVE_HOSTNAME_GATEWAYS"}
	silent := []string{"PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API", "LOCAL_CLUSTER_SECRET_WATCHER"}

	monitoring := freeAddr(t)
	args := []string{"--state-dir", t.TempDir(), "--secureGRPCAddr", freeAddr(t), "--httpAddr", freeAddr(t),
		"--httpsAddr", freeAddr(t), "--monitoringAddr", monitoring, "--grace-period", "1s"}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	go func() { exited <- discovery(ctx, args, func(k string) string { return env[k] }, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-exited; err != nil {
			t.Errorf("discovery: %v", err)
		}
		if t.Failed() {
			t.Logf("istiod's log:\n%s", logs.String())
		}
	})

	var metrics string
	waitUntil(t, "/metrics", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + monitoring + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		metrics = string(b)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	for _, name := range reported {
		if !strings.Contains(metrics, `bulwark_ignored_setting{name="`+name+`"} 1`) {
			t.Errorf("no series of %s in\n%s", name, grepLines(metrics, "bulwark_ignored_setting"))
		}
		if n := strings.Count(logs.String(), `level=WARN msg="Istio setting not read" name=`+name+" instead="); n != 1 {
			t.Errorf("%d warnings of %s, want 1", n, name)
		}
	}
	if !strings.Contains(logs.String(), "global.readerSecrets") {
		t.Error("the remote credentials warning does not say what istiod does instead")
	}
	for _, name := range silent {
		if strings.Contains(metrics+logs.String(), name) {
			t.Errorf("%s reported", name)
		}
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
