package xds

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Two rules for one host in one namespace merge as Istio merges them;
// the newer one's traffic policy and its subset of a name already taken
// are not used, which the problem log says, once.
func TestMergedDestinationRulesAreReported(t *testing.T) {
	var logs lockedBuffer
	newHarness(t, modeltest.Load(t, envoyManifests+`
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: a, namespace: app, creationTimestamp: "2026-01-01T00:00:01Z"}
spec: {host: echo, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}, subsets: [{name: v1, labels: {version: v1}}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: b, namespace: app, creationTimestamp: "2026-01-01T00:00:02Z"}
spec: {host: echo.app.svc.cluster.local, trafficPolicy: {tls: {mode: DISABLE}}, subsets: [{name: v1, labels: {version: v2}}, {name: v2}]}
`), func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	waitFor(t, "the merge reported", func() bool {
		return strings.Contains(logs.String(), "app/b subset v1: not used, merged into app/a")
	})
	out := logs.String()
	if strings.Count(out, "app/b trafficPolicy: not used, merged into app/a") != 1 {
		t.Errorf("the unused traffic policy is not reported once:\n%s", out)
	}
	if strings.Contains(out, "subset v2") {
		t.Errorf("a subset that was merged is reported:\n%s", out)
	}
}
