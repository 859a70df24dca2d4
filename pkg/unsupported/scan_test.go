package unsupported

import (
	"context"
	"reflect"
	"testing"
	"time"

	"k8s.io/client-go/metadata"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// Scan reports, in one pass, what a running Reporter reports of the same
// objects: one source for istiod migrate check and istiod's runtime view.
func TestScanReportsWhatTheReporterReports(t *testing.T) {
	c := startCluster(t)
	ns := c.env.Namespace(t)
	ef := kind(t, "networking.istio.io", "EnvoyFilter")
	dr := kind(t, "networking.istio.io", "DestinationRule")
	c.create(t, ef, ns, "lua", map[string]any{"configPatches": []any{}})
	c.create(t, dr, ns, "lb", map[string]any{"host": "a", "trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": "ROUND_ROBIN"}}})
	c.create(t, dr, ns, "tls-only", map[string]any{"host": "b", "trafficPolicy": map[string]any{"tls": map[string]any{"mode": "ISTIO_MUTUAL"}}})

	r, _ := c.reporter(t, nil)
	waitFor(t, "the reporter to list both objects", func() bool { return len(inNamespace(r.Report(), ns)) == 2 })

	meta, err := metadata.NewForConfig(c.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	_, log := logtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := Scan(ctx, Config{Discovery: c.env.Client(t).Discovery(), Dynamic: c.dyn, Metadata: meta, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	want := inNamespace(r.Report(), ns)
	if g := inNamespace(got, ns); !reflect.DeepEqual(g, want) {
		t.Errorf("Scan listed\n%+v\nthe Reporter\n%+v", g, want)
	}
	if len(got.Watched) != len(policy.Reported())-len(got.NotInstalled) {
		t.Errorf("Scan watched %d kinds and found %d not installed, of %d", len(got.Watched), len(got.NotInstalled), len(policy.Reported()))
	}
}

// A scan that cannot list every kind in time says so, instead of
// returning a partial list as if it were whole.
func TestScanFailsWhenCancelled(t *testing.T) {
	c := startCluster(t)
	meta, err := metadata.NewForConfig(c.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Scan(ctx, Config{Discovery: c.env.Client(t).Discovery(), Dynamic: c.dyn, Metadata: meta}); err == nil {
		t.Error("Scan with a cancelled context returned no error")
	}
}
