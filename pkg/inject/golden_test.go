package inject

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current injector")

// goldenCase is one file in testdata/inputs: the pod plus what the request
// and the ConfigMap would supply.
type goldenCase struct {
	Description     string            `json:"description"`
	Namespace       string            `json:"namespace,omitempty"`
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
	Config          string            `json:"config,omitempty"`
	Values          map[string]any    `json:"values,omitempty"`
	Cluster         string            `json:"cluster,omitempty"`
	Network         string            `json:"network,omitempty"`
	Pod             corev1.Pod        `json:"pod"`
}

func loadGoldenCase(t *testing.T, path string) goldenCase {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read input: %v", err)
	}
	var c goldenCase
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		t.Fatalf("parse input %s: %v", path, err)
	}
	if c.Description == "" {
		t.Fatalf("input %s has no description", path)
	}
	return c
}

func (c goldenCase) params(t *testing.T) Params {
	t.Helper()
	var vals []byte
	if c.Values != nil {
		var err error
		if vals, err = json.Marshal(c.Values); err != nil {
			t.Fatalf("encode values: %v", err)
		}
	}
	cfg, v, err := ParseConfig([]byte(c.Config), vals)
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	return Params{
		Namespace: firstNonEmpty(c.Namespace, "default"), NamespaceLabels: c.NamespaceLabels,
		Config: cfg, Values: v, ClusterID: c.Cluster, Network: c.Network,
	}
}

// renderGolden runs Inject, applies its patch to the pod's JSON and returns
// the result as YAML headed by the decision.
func renderGolden(t *testing.T, c goldenCase) []byte {
	t.Helper()
	pod := c.Pod.DeepCopy()
	res, err := Inject(pod, c.params(t))
	var out bytes.Buffer
	out.WriteString("# " + c.Description + "\n")
	if err != nil {
		out.WriteString("# denied: " + err.Error() + "\n")
		return out.Bytes()
	}
	out.WriteString("# reason: " + res.Reason + "\n")
	orig, err := json.Marshal(pod)
	if err != nil {
		t.Fatalf("encode pod: %v", err)
	}
	patched, err := applyPatch(orig, res.Patch)
	if err != nil {
		t.Fatalf("apply patch: %v", err)
	}
	// The patch must reproduce exactly what Mutate built.
	if res.Injected {
		mutated, _, err := Mutate(c.Pod.DeepCopy(), c.params(t))
		if err != nil {
			t.Fatalf("mutate: %v", err)
		}
		want, _ := json.Marshal(mutated)
		if !jsonEqual(t, want, patched) {
			t.Fatalf("patched pod differs from the mutated pod")
		}
	}
	y, err := yaml.JSONToYAML(patched)
	if err != nil {
		t.Fatalf("to YAML: %v", err)
	}
	out.Write(y)
	return out.Bytes()
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("decode: %v", err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "inputs", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs found: %v", err)
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			got := renderGolden(t, loadGoldenCase(t, in))
			goldenPath := filepath.Join("testdata", "golden", name)
			if *update {
				if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath)
			if errors.Is(err, os.ErrNotExist) {
				t.Fatalf("no golden %s; run go test ./pkg/inject -run TestGolden -update", goldenPath)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("golden %s is stale; run with -update and review the diff.\n--- got ---\n%s", goldenPath, got)
			}
		})
	}
}

// TestGoldenHasInput fails on a golden file whose input is gone.
func TestGoldenHasInput(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join("testdata", "golden", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goldens {
		in := filepath.Join("testdata", "inputs", filepath.Base(g))
		if _, err := os.Stat(in); err != nil {
			if *update {
				if err := os.Remove(g); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("golden %s has no input %s", g, in)
		}
	}
}
