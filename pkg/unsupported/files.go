package unsupported

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// FilesConfig configures Files.
type FilesConfig struct {
	Dir    string        // the file model's directory (--configDir)
	Resync time.Duration // default 30s
	Logger *slog.Logger
}

// Files reports, in local mode, what Bulwark ignores of the manifests of
// the file model's directory: the fields it does not read of the kinds it
// reads (a kind it does not read at all makes the file model refuse the
// whole directory, which it logs). It reads the directory as the model
// does, and logs each object when it appears and each time what is
// ignored of it changes.
type Files struct {
	cfg FilesConfig

	mu      sync.Mutex
	objects map[string]Object // by group, kind, namespace and name
}

// NewFiles returns a reporter of cfg.Dir. It does no I/O.
func NewFiles(cfg FilesConfig) *Files {
	cfg.Resync = cmp.Or(cfg.Resync, 30*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Files{cfg: cfg, objects: map[string]Object{}}
}

// Run reads the directory now and after each change until ctx is done.
func (f *Files) Run(ctx context.Context) error {
	dirwatch.Run(ctx, f.cfg.Dir, dirwatch.DefaultDebounce, f.cfg.Resync, f.cfg.Logger, f.Reload)
	return nil
}

// Reload reads the directory once. A directory the file model would
// refuse is left to the model to log; the last report stands.
func (f *Files) Reload() {
	objs, err := scanDir(f.cfg.Dir)
	if err != nil {
		f.cfg.Logger.Debug("model directory not scanned for ignored fields", "dir", f.cfg.Dir, "err", err)
		return
	}
	f.mu.Lock()
	prev := f.objects
	f.objects = objs
	f.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(objs)) {
		o := objs[key]
		if p, ok := prev[key]; !ok || !slices.Equal(p.Ignored, o.Ignored) {
			f.cfg.Logger.Warn(Message, "kind", o.Kind, "group", o.Group, "object", o.Namespace+"/"+o.Name,
				"ignored", strings.Join(o.Ignored, "; "))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(prev)) {
		if _, ok := objs[key]; !ok {
			o := prev[key]
			f.cfg.Logger.Info("Istio configuration not honoured is gone", "kind", o.Kind, "group", o.Group, "object", o.Namespace+"/"+o.Name)
		}
	}
}

// Report lists the objects of the directory of which something is
// ignored.
func (f *Files) Report() Report {
	f.mu.Lock()
	objs := slices.Collect(maps.Values(f.objects))
	f.mu.Unlock()
	rep := Report{Objects: objs, Watched: []string{}, NotInstalled: []string{}}
	if rep.Objects == nil {
		rep.Objects = []Object{}
	}
	sortObjects(rep.Objects)
	return rep
}

// Handler serves Report as JSON: istiod's /debug/unsupported.
func (f *Files) Handler() http.Handler { return reportHandler(f.Report) }

// Collector returns the gauge bulwark_unsupported_config{group,kind}: one
// series per kind of which fields may be ignored.
func (f *Files) Collector() prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		counts := map[string]int{}
		for _, o := range f.Report().Objects {
			counts[o.Kind+"."+o.Group]++
		}
		for _, k := range policy.Reported() {
			if k.NeedsSpec() {
				ch <- prometheus.MustNewConstMetric(unsupportedDesc, prometheus.GaugeValue, float64(counts[k.String()]), k.Group, k.Name)
			}
		}
	})
}

// manifest is the part of a manifest that says what is ignored of it.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec map[string]any `json:"spec"`
}

// scanDir reads the manifests of dir as the file model does (its *.yaml,
// *.yml and *.json files, not hidden, within its limits) and returns the
// objects of which the kinds Bulwark reads have fields ignored.
func scanDir(dir string) (map[string]Object, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]Object{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read model directory: %w", err)
	}
	var names []string
	for _, e := range entries {
		switch n := e.Name(); {
		case strings.HasPrefix(n, "."), e.IsDir():
		case slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(n)):
			names = append(names, n)
		}
	}
	if len(names) > model.MaxFiles {
		return nil, fmt.Errorf("%d files, limit %d", len(names), model.MaxFiles)
	}
	out := map[string]Object{}
	docs := 0
	for _, n := range names {
		data, err := dirwatch.ReadFile(filepath.Join(dir, n), model.MaxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			if docs++; docs > model.MaxDocuments {
				return nil, fmt.Errorf("more than %d documents", model.MaxDocuments)
			}
			o, ok, err := ignoredIn(doc)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			if ok {
				out[o.Group+"/"+o.Kind+"/"+o.Namespace+"/"+o.Name] = o
			}
		}
	}
	return out, nil
}

// ignoredIn says what is ignored of the manifest doc, if it is of a kind
// Bulwark reads with fields it ignores. A document that is not YAML, or
// not a manifest, is an error, as it is for the file model.
func ignoredIn(doc []byte) (Object, bool, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return Object{}, false, fmt.Errorf("yaml: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(js, &m); err != nil {
		return Object{}, false, fmt.Errorf("manifest: %w", err)
	}
	group, _, ok := strings.Cut(m.APIVersion, "/")
	if !ok {
		return Object{}, false, nil
	}
	k, ok := policy.Lookup(group, m.Kind)
	if !ok || !k.NeedsSpec() {
		return Object{}, false, nil
	}
	ignored := k.Ignored(m.Metadata.Annotations, m.Spec)
	if len(ignored) == 0 {
		return Object{}, false, nil
	}
	return Object{Group: k.Group, Kind: k.Name, Namespace: cmp.Or(m.Metadata.Namespace, "default"), Name: m.Metadata.Name, Ignored: ignored}, true, nil
}
