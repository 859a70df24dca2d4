package ca_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rotationtest"
)

func TestDirRotationStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	rotationtest.StoreContract(t, ca.NewDirRotationStore(dir))

	// What another hand wrote there is refused, not trusted.
	if err := os.WriteFile(filepath.Join(dir, "rotation.json"), []byte(`{"phase":"activate"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.NewDirRotationStore(dir).Load(context.Background()); err == nil {
		t.Error("a malformed rotation.json was loaded")
	}
}
