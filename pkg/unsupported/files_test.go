package unsupported

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

const withLoadBalancer = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: app}
spec:
  host: reviews
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}, tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: app}
spec: {rules: [{}]}
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: app}
spec: {ports: [{port: 80}]}
`

// TestFilesReportIgnoredFieldsOfTheModelDirectory: in local mode the
// fields the file model does not read are reported as in Kubernetes mode:
// a line when an object appears and when what is ignored of it changes,
// the report and the gauge.
func TestFilesReportIgnoredFieldsOfTheModelDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rec, log := logtest.New(t)
	f := NewFiles(FilesConfig{Dir: dir, Logger: log})
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.Collector())
	lines := func() int { return rec.Count(Message, "kind=DestinationRule", "object=app/reviews") }

	write(withLoadBalancer)
	f.Reload()
	f.Reload() // unchanged: no line
	rep := f.Report()
	if len(rep.Objects) != 1 || rep.Objects[0].Name != "reviews" ||
		!slices.Equal(rep.Objects[0].Ignored, []string{"spec.trafficPolicy.loadBalancer: ignored, not generated"}) {
		t.Fatalf("report %+v", rep.Objects)
	}
	if n := lines(); n != 1 {
		t.Errorf("%d lines for the DestinationRule, want 1", n)
	}
	if got := gaugeOf(t, reg, "DestinationRule"); got != 1 {
		t.Errorf("bulwark_unsupported_config{kind=DestinationRule} = %v, want 1", got)
	}

	write("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: app}\nspec: {host: reviews, trafficPolicy: {outlierDetection: {}}}\n")
	f.Reload()
	if n := lines(); n != 2 {
		t.Errorf("%d lines after the change, want 2", n)
	}
	write("not: [valid")
	f.Reload() // the model logs a bad directory; the report stands
	if len(f.Report().Objects) != 1 {
		t.Errorf("a bad directory changed the report: %+v", f.Report().Objects)
	}
	if err := os.Remove(filepath.Join(dir, "mesh.yaml")); err != nil {
		t.Fatal(err)
	}
	f.Reload()
	if len(f.Report().Objects) != 0 || rec.Count("is gone", "object=app/reviews") != 1 {
		t.Errorf("the removed DestinationRule: report %+v", f.Report().Objects)
	}
}

// gaugeOf is the value of the bulwark_unsupported_config series of kind
// in reg.
func gaugeOf(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series of %s", kind)
	return 0
}
