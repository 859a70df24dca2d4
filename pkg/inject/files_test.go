package inject

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	src := NewFileSource(dir, store, slog.New(slog.DiscardHandler))
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
	time.Sleep(200 * time.Millisecond) // a bad update must change nothing; there is no event to wait for
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
