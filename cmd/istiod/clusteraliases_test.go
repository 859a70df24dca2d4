package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestClusterAliasesFlag: --clusterAliases is documented, and a value
// that is malformed or breaks a limit is a usage error naming the flag
// and the reason.
func TestClusterAliasesFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run([]string{"discovery", "-h"}, noEnv, &stdout, &stderr)
	if !strings.Contains(stderr.String(), "-clusterAliases") {
		t.Errorf("discovery's help does not document --clusterAliases:\n%s", stderr.String())
	}
	for name, tc := range map[string]struct{ value, want string }{
		"a pair without '='":               {"old", "want <alias>=<cluster>"},
		"two aliases of one cluster":       {"old1=b,old2=b", "two aliases"},
		"istiod's own ID as an alias":      {"Kubernetes=b", "istiod's own cluster ID"},
		"a chain":                          {"older=old,old=b", "is itself an alias"},
		"an ID that is no Secret data key": {"old=b/c", "'/'"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"discovery", "--state-dir", t.TempDir(), "--clusterAliases", tc.value}, noEnv, &stdout, &stderr)
			if code != exitUsage || !strings.Contains(stderr.String(), "clusterAliases") || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant a usage error with %q", code, stderr.String(), tc.want)
			}
		})
	}
}
