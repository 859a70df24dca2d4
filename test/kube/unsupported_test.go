package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported/unsupportedtest"
)

// TestUnsupportedConfigIsReportedWithoutAPush: istiod, with the chart's
// RBAC, watches the Istio and Gateway API kinds it does not honour once
// their CRDs exist, and reports each object: a log line, the gauge on
// /metrics and /debug/unsupported. Their creation publishes no model and
// pushes nothing.
//
// Not parallel: other tests' objects would change istiod's model.
func TestUnsupportedConfigIsReportedWithoutAPush(t *testing.T) {
	env := testenv.Get(t)
	env.InstallCRDs(t, unsupportedtest.CRDs(t))
	p := startIstiod(t, env)
	ns := env.Namespace(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the namespace's own changes settle
	published := countLines(p.logs.String(), `msg="mesh model published"`)
	pushes := countLines(p.logs.String(), `msg="pushing model"`)

	objects := []struct{ group, kind, name string }{
		{"networking.istio.io", "EnvoyFilter", "add-header"},
		{"networking.istio.io", "WorkloadGroup", "group"},
		{"extensions.istio.io", "WasmPlugin", "plugin"},
		{"telemetry.istio.io", "Telemetry", "mesh-logs"},
		{"gateway.networking.k8s.io", "HTTPRoute", "route"},
	}
	for _, o := range objects {
		k, ok := policy.Lookup(o.group, o.kind)
		if !ok {
			t.Fatalf("no kind %s.%s", o.kind, o.group)
		}
		gvr := schema.GroupVersionResource{Group: k.Group, Version: unsupportedtest.Version(k), Resource: k.Resource}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": k.Group + "/" + gvr.Version, "kind": k.Name,
			"metadata": map[string]any{"name": o.name, "namespace": ns}, "spec": map[string]any{},
		}}
		if _, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	var listed []string
	waitFor(t, "every object at /debug/unsupported", 30*time.Second, func() bool {
		listed = nil
		for _, o := range p.debugUnsupported(t).Objects {
			if o.Namespace == ns {
				listed = append(listed, o.Kind+"/"+o.Name)
			}
		}
		return len(listed) == len(objects)
	})
	for _, o := range objects {
		if !slices.Contains(listed, o.kind+"/"+o.name) {
			t.Errorf("/debug/unsupported lists %v, not %s/%s", listed, o.kind, o.name)
		}
		if n := countLines(p.logs.String(), `msg="Istio configuration not honoured"`, "kind="+o.kind, "object="+ns+"/"+o.name); n != 1 {
			t.Errorf("%s %s logged %d times, want once", o.kind, o.name, n)
		}
	}
	if v := p.metric(t, `bulwark_unsupported_config{group="networking.istio.io",kind="EnvoyFilter"}`); v < 1 {
		t.Errorf("bulwark_unsupported_config of EnvoyFilter %v, want at least 1", v)
	}

	time.Sleep(2 * time.Second) // longer than the model's debounce
	if n := countLines(p.logs.String(), `msg="mesh model published"`); n != published {
		t.Errorf("%d models published after objects Bulwark does not read, want none", n-published)
	}
	if n := countLines(p.logs.String(), `msg="pushing model"`); n != pushes {
		t.Errorf("%d pushes after objects Bulwark does not read, want none", n-pushes)
	}
	p.checkNeverRefused(t)
}

// debugUnsupported reads p's /debug/unsupported.
func (p *istiod) debugUnsupported(t *testing.T) unsupported.Report {
	t.Helper()
	resp, err := http.Get("http://" + p.cfg.MonitoringAddr + "/debug/unsupported")
	if err != nil {
		t.Fatalf("%s: /debug/unsupported: %v", p.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var rep unsupported.Report
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rep) != nil {
		t.Fatalf("%s: /debug/unsupported: %d %s", p.name, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return rep
}
