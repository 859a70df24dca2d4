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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

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
	client := env.Client(t)
	p.catchUp(t, client, ns, "canary-before") // the namespace's own changes are behind
	published := countLines(p.logs.String(), `msg="mesh model published"`)
	pushes := countLines(p.logs.String(), `msg="pushing model"`)

	objects := []struct {
		group, kind, name string
		spec              map[string]any
	}{
		{"networking.istio.io", "EnvoyFilter", "add-header", nil},
		{"networking.istio.io", "WorkloadGroup", "group", nil},
		{"extensions.istio.io", "WasmPlugin", "plugin", nil},
		{"networking.istio.io", "ProxyConfig", "proxy-config", nil},
		{"gateway.networking.k8s.io", "HTTPRoute", "route", nil},
		{"gateway.networking.k8s.io", "ListenerSet", "listeners", nil},
		{"gateway.networking.x-k8s.io", "XBackendTrafficPolicy", "traffic", nil},
		{"inference.networking.k8s.io", "InferencePool", "pool", nil},
		// Kubernetes' own, of Istio's class: Istio would serve it.
		{"networking.k8s.io", "Ingress", "istio-ingress", map[string]any{"ingressClassName": "istio",
			"defaultBackend": map[string]any{"service": map[string]any{"name": "web", "port": map[string]any{"number": int64(80)}}}}},
	}
	// An Ingress of another class is not Istio's: not reported.
	others := []struct {
		group, kind, name string
		spec              map[string]any
	}{
		{"networking.k8s.io", "Ingress", "nginx-ingress", map[string]any{"ingressClassName": "nginx",
			"defaultBackend": map[string]any{"service": map[string]any{"name": "web", "port": map[string]any{"number": int64(80)}}}}},
	}
	for _, o := range append(others, objects...) {
		k, ok := policy.Lookup(o.group, o.kind)
		if !ok {
			t.Fatalf("no kind %s.%s", o.kind, o.group)
		}
		gvr := schema.GroupVersionResource{Group: k.Group, Version: unsupportedtest.Version(k), Resource: k.Resource}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": k.Group + "/" + gvr.Version, "kind": k.Name,
			"metadata": map[string]any{"name": o.name, "namespace": ns}, "spec": map[string]any{},
		}}
		if o.spec != nil {
			obj.Object["spec"] = o.spec
		}
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
	for _, o := range others {
		if n := countLines(p.logs.String(), "kind="+o.kind, "object="+ns+"/"+o.name); n != 0 {
			t.Errorf("%s %s, not Istio's to serve, logged %d times", o.kind, o.name, n)
		}
	}
	if v := p.metric(t, `bulwark_unsupported_config{group="networking.istio.io",kind="EnvoyFilter"}`); v < 1 {
		t.Errorf("bulwark_unsupported_config of EnvoyFilter %v, want at least 1", v)
	}

	// A change the model reads, made after the objects: once it is
	// published and pushed, so is anything the objects caused.
	p.catchUp(t, client, ns, "canary-after")
	if n := countLines(p.logs.String(), `msg="mesh model published"`) - 1; n != published {
		t.Errorf("%d models published after objects Bulwark does not read, want none", n-published)
	}
	if n := countLines(p.logs.String(), `msg="pushing model"`) - 1; n != pushes {
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

// catchUp creates a Service named name in ns, a change the mesh model
// reads, and waits until p has published a model holding it and pushed
// that very model: whatever istiod was given before is then built and
// pushed too (or folded into the same model), so counting publications
// and pushes afterwards needs no sleeping. It counts as one of each.
func (p *istiod) catchUp(t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	mark := len(p.logs.String())
	if _, err := client.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the model with "+ns+"/"+name+" published and pushed", 30*time.Second, func() bool {
		var version string
		for _, line := range strings.Split(p.logs.String()[mark:], "\n") {
			if v, ok := logValue(line, `msg="mesh model published"`, "version"); ok {
				version = v
			}
			if v, ok := logValue(line, `msg="pushing model"`, "version"); ok && version != "" && v == version {
				return true
			}
		}
		return false
	})
}

// logValue reads key's value from a text-handler log line holding msg.
func logValue(line, msg, key string) (string, bool) {
	if !strings.Contains(line, msg) {
		return "", false
	}
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return "", false
	}
	v, _, _ = strings.Cut(v, " ")
	return v, true
}
