package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestExternalIstiodReadsIstiosVariable: --external-istiod is documented
// with Istio's variable, and a malformed value of the variable is a usage
// error.
func TestExternalIstiodReadsIstiosVariable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run([]string{"discovery", "-h"}, noEnv, &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-external-istiod") || !strings.Contains(stderr.String(), "EXTERNAL_ISTIOD") {
		t.Errorf("discovery's help does not document --external-istiod and its variable:\n%s", stderr.String())
	}
	env := func(k string) string {
		if k == "EXTERNAL_ISTIOD" {
			return "sometimes"
		}
		return ""
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"discovery"}, env, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "EXTERNAL_ISTIOD") {
		t.Errorf("a malformed EXTERNAL_ISTIOD: exit %d, stderr:\n%s", code, stderr.String())
	}
}
