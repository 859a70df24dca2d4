// Package helm renders and lints the charts/istiod Helm chart through Helm's
// own Go API, the same code `helm template` and `helm lint` run. Its helpers
// are meant to be reused by tests that install the rendered objects into a
// real API server.
package helm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Defaults of a render: the names a user of the README gets.
const (
	DefaultReleaseName = "istiod"
	DefaultNamespace   = "istio-system"
	// KubeVersion is the Kubernetes version the chart is rendered for. A
	// program built from Helm's Go module reports v1.20 unless told, which is
	// below the chart's kubeVersion.
	KubeVersion = "v1.35.0"
)

// Options say how to render the chart. The zero value renders the default
// install into istio-system.
type Options struct {
	// ReleaseName defaults to DefaultReleaseName.
	ReleaseName string
	// Namespace defaults to DefaultNamespace.
	Namespace string
	// ValuesFiles are read in order, as `helm template -f`.
	ValuesFiles []string
	// Values are laid over the files, as `--set`; nested maps merge.
	Values map[string]any
	// APIVersions are extra group/versions the cluster serves, e.g.
	// "monitoring.coreos.com/v1".
	APIVersions []string
	// IncludeCRDs adds the crds/ folder to the manifest, as
	// `helm template --include-crds`.
	IncludeCRDs bool
}

// Rendered is one render of the chart.
type Rendered struct {
	// Manifest is the rendered YAML, documents in Helm's install order.
	Manifest string
	// Objects are the documents of Manifest, parsed.
	Objects []*unstructured.Unstructured
	// Notes is the rendered NOTES.txt.
	Notes string
}

// ChartDir is the absolute path of charts/istiod.
func ChartDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("helm: cannot locate the source file") // only without debug info
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "charts", "istiod")
}

// LoadChart loads charts/istiod from disk.
func LoadChart() (*chart.Chart, error) {
	c, err := loader.Load(ChartDir())
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	return c, nil
}

// MergeValues reads the values files and lays vals over them.
func MergeValues(files []string, vals map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read values: %w", err)
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("parse values %s: %w", f, err)
		}
		out = chartutil.MergeTables(m, out)
	}
	if vals != nil {
		// MergeTables keeps the first argument's keys, so vals win.
		out = chartutil.MergeTables(deepCopy(vals), out)
	}
	return out, nil
}

// Render renders the chart as `helm install --dry-run` without a cluster
// (`helm template`), values schema checks included.
func Render(opts Options) (*Rendered, error) {
	c, err := LoadChart()
	if err != nil {
		return nil, err
	}
	vals, err := MergeValues(opts.ValuesFiles, opts.Values)
	if err != nil {
		return nil, err
	}
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version: %w", err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.DryRunOption = "client"
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = or(opts.ReleaseName, DefaultReleaseName)
	install.Namespace = or(opts.Namespace, DefaultNamespace)
	install.KubeVersion = kv
	install.APIVersions = opts.APIVersions
	install.IncludeCRDs = opts.IncludeCRDs
	rel, err := install.Run(c, vals)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	objs, err := ParseManifest(rel.Manifest)
	if err != nil {
		return nil, err
	}
	return &Rendered{Manifest: rel.Manifest, Objects: objs, Notes: rel.Info.Notes}, nil
}

// ParseManifest splits a multi-document manifest into objects, in order.
func ParseManifest(manifest string) ([]*unstructured.Unstructured, error) {
	docs := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	// SplitManifests names documents manifest-0, manifest-1, ...
	sort.Slice(keys, func(i, j int) bool { return docIndex(keys[i]) < docIndex(keys[j]) })
	var out []*unstructured.Unstructured
	for _, k := range keys {
		doc := strings.TrimSpace(docs[k])
		if doc == "" || isOnlyComments(doc) {
			continue
		}
		m := map[string]any{}
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("parse %s: %w\n%s", k, err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("parse %s: no kind or apiVersion\n%s", k, doc)
		}
		out = append(out, u)
	}
	return out, nil
}

// CRDs returns the chart's crds/ folder as objects.
func CRDs() ([]*unstructured.Unstructured, error) {
	c, err := LoadChart()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for _, crd := range c.CRDObjects() {
		buf.WriteString("---\n")
		buf.Write(crd.File.Data)
		buf.WriteString("\n")
	}
	return ParseManifest(buf.String())
}

// Lint runs `helm lint --strict` on the chart with vals and returns every
// message of warning level or above as an error.
func Lint(namespace string, vals map[string]any) error {
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return fmt.Errorf("kube version: %w", err)
	}
	l := action.NewLint()
	l.Strict = true
	l.Namespace = or(namespace, DefaultNamespace)
	l.KubeVersion = kv
	res := l.Run([]string{ChartDir()}, vals)
	if res.TotalChartsLinted != 1 {
		res.Errors = append(res.Errors, fmt.Errorf("linted %d charts, want 1", res.TotalChartsLinted))
	}
	return errors.Join(res.Errors...)
}

func docIndex(key string) int {
	var n int
	if _, err := fmt.Sscanf(key, "manifest-%d", &n); err != nil {
		return 1 << 30
	}
	return n
}

func isOnlyComments(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}
