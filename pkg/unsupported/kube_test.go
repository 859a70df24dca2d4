package unsupported

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported/unsupportedtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// cluster is the shared apiserver with every CRD the reporter watches: the
// chart's, and open-schema ones for the kinds the chart does not install.
type cluster struct {
	env *testenv.Env
	dyn dynamic.Interface
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env := testenv.Get(t)
	chart, err := filepath.Glob("../../charts/istiod/crds/*.yaml")
	if err != nil || len(chart) != len(unsupportedtest.ChartKinds) {
		t.Fatalf("chart CRDs %v: %v", chart, err)
	}
	env.InstallCRDs(t, append(chart, unsupportedtest.CRDs(t))...)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{env: env, dyn: dyn}
}

// reporter starts a reporter of kinds (all of package policy's when nil)
// on c, polling every 100ms, and waits until the kinds served are synced.
func (c *cluster) reporter(t *testing.T, kinds []policy.Kind) (*Reporter, *logtest.Recorder) {
	t.Helper()
	meta, err := metadata.NewForConfig(c.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	rec, log := logtest.New(t)
	r := New(Config{Discovery: c.env.Client(t).Discovery(), Dynamic: c.dyn, Metadata: meta, Kinds: kinds, Poll: 100 * time.Millisecond, Logger: log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the reporter synced", func() bool { return len(r.watches()) > 0 && r.HasSynced() })
	return r, rec
}

func kind(t *testing.T, group, name string) policy.Kind {
	t.Helper()
	k, ok := policy.Lookup(group, name)
	if !ok {
		t.Fatalf("no kind %s.%s", name, group)
	}
	return k
}

func (c *cluster) resource(k policy.Kind) dynamic.NamespaceableResourceInterface {
	return c.dyn.Resource(schema.GroupVersionResource{Group: k.Group, Version: unsupportedtest.Version(k), Resource: k.Resource})
}

// create creates an object of kind k named ns/name with spec.
func (c *cluster) create(t *testing.T, k policy.Kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	out, err := c.createObject(k, ns, name, spec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryCreate is create for other goroutines than the test's.
func (c *cluster) tryCreate(k policy.Kind, ns, name string, spec map[string]any) error {
	_, err := c.createObject(k, ns, name, spec)
	return err
}

func (c *cluster) createObject(k policy.Kind, ns, name string, spec map[string]any) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k.Group + "/" + unsupportedtest.Version(k),
		"kind":       k.Name,
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}}
	out, err := c.resource(k).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create %s %s/%s: %w", k.Name, ns, name, err)
	}
	return out, nil
}

// update applies change to the object and writes it back.
func (c *cluster) update(t *testing.T, k policy.Kind, obj *unstructured.Unstructured, change func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	change(obj)
	out, err := c.resource(k).Namespace(obj.GetNamespace()).Update(context.Background(), obj, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update %s %s: %v", k.Name, obj.GetName(), err)
	}
	return out
}

// waitFor polls cond until it holds, failing after 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inNamespace is the report's objects of ns.
func inNamespace(rep Report, ns string) []Object {
	var out []Object
	for _, o := range rep.Objects {
		if o.Namespace == ns {
			out = append(out, o)
		}
	}
	return out
}
