package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSidecarIngressTLSReadsIstiosVariable: --tls-on-sidecar-ingress is
// documented with Istio's variable, and a malformed value of the variable
// is a usage error.
func TestSidecarIngressTLSReadsIstiosVariable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run([]string{"discovery", "-h"}, noEnv, &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-tls-on-sidecar-ingress") || !strings.Contains(stderr.String(), "ENABLE_TLS_ON_SIDECAR_INGRESS") {
		t.Errorf("discovery's help does not document --tls-on-sidecar-ingress and its variable:\n%s", stderr.String())
	}
	env := func(k string) string {
		if k == "ENABLE_TLS_ON_SIDECAR_INGRESS" {
			return "maybe"
		}
		return ""
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"discovery"}, env, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "ENABLE_TLS_ON_SIDECAR_INGRESS") {
		t.Errorf("a malformed ENABLE_TLS_ON_SIDECAR_INGRESS: exit %d, stderr:\n%s", code, stderr.String())
	}
}
