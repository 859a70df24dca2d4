package inject

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

func waitSnapshot(t *testing.T, s *Store, cond func(*Snapshot) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond(s.Load()) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFileSourceFollowsTheDirectoryAndKeepsTheLastGoodConfig(t *testing.T) {
	dir := t.TempDir()
	store := NewStore()
	defaults := store.Load()
	rec, log := logtest.New(t)
	src := NewFileSource(dir, store, log)
	src.debounce = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Run(ctx)

	config, values := DefaultConfigFiles()
	disabled := strings.Replace(string(config), "policy: enabled", "policy: disabled", 1)
	if disabled == string(config) {
		t.Fatal("default config has no 'policy: enabled' line to change")
	}
	os.WriteFile(filepath.Join(dir, "values"), values, 0o600)
	os.WriteFile(filepath.Join(dir, "config"), []byte(disabled), 0o600)
	waitSnapshot(t, store, func(s *Snapshot) bool { return s != defaults && s.Config.Policy == "disabled" }, "the files' config")
	good := store.Load()

	os.WriteFile(filepath.Join(dir, "config"), []byte("policy: [not, a, policy]\nbogus: 1\n"), 0o600)
	// The source's verdict on the bad update is its log line; by then
	// the store holds whatever the update made of it.
	deadline := time.Now().Add(5 * time.Second)
	for rec.Count("injector configuration rejected") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the bad update was not rejected within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if store.Load() != good {
		t.Fatal("a bad update replaced the last good configuration")
	}
}

func TestReadConfigFileIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	os.WriteFile(path, make([]byte, maxConfigFileSize+1), 0o600)
	if _, err := readConfigFile(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v, want a size error", err)
	}
}
