// Package modeltest builds mesh-model snapshots for tests from manifests in
// the format of the model directory (see package model).
package modeltest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Load returns the snapshot of manifests, read as the only file of a model
// directory, failing the test when they do not load.
func Load(t testing.TB, manifests string) *model.Snapshot {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := model.LoadDir(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}
