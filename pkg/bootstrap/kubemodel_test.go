package bootstrap

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
)

// kubeconfigFile names an API server that is never contacted.
func kubeconfigFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `{"apiVersion": "v1", "kind": "Config", "current-context": "c",
		"clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
		"users": [{"name": "u", "user": {"token": "t"}}],
		"contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTheModelSource(t *testing.T) {
	for name, tc := range map[string]struct {
		kube, configDir bool
		wantFile        bool
		wantKube        bool
	}{
		"locally, the files":                     {wantFile: true},
		"in Kubernetes, the API server":          {kube: true, wantKube: true},
		"in Kubernetes with a config dir, files": {kube: true, configDir: true, wantFile: true},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.StateDir = t.TempDir()
			if tc.kube {
				cfg.Kubeconfig = kubeconfigFile(t)
			}
			if tc.configDir {
				cfg.ConfigDir = t.TempDir()
			}
			s, err := New(cfg, catest.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.model != nil; got != tc.wantFile {
				t.Errorf("file model %t; want %t", got, tc.wantFile)
			}
			if got := s.kube != nil && s.kube.model != nil; got != tc.wantKube {
				t.Errorf("Kubernetes model %t; want %t", got, tc.wantKube)
			}
			_, files := s.unsupported.(*unsupported.Files)
			_, cluster := s.unsupported.(*unsupported.Reporter)
			if files != tc.wantFile || cluster != tc.wantKube {
				t.Errorf("unsupported-config reporter %T; want the file model's %t, the cluster's %t", s.unsupported, tc.wantFile, tc.wantKube)
			}
		})
	}
}

type fakeModel struct{ synced atomic.Bool }

func (f *fakeModel) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (f *fakeModel) HasSynced() bool               { return f.synced.Load() }

func TestNotSyncedUntilTheModelIs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.Kubeconfig = kubeconfigFile(t)
	s, err := New(cfg, catest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	s.kube.rootCerts = nil // its namespaces would need an API server
	s.kube.clusters = nil  // so would its remote secrets (pkg/multicluster tests its readiness)
	model := &fakeModel{}
	s.kube.model = model
	if s.kubeSynced() {
		t.Fatal("synced before the model")
	}
	model.synced.Store(true)
	if !s.kubeSynced() {
		t.Fatal("not synced once the model is")
	}
}
