package dirwatch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func waitCount(t *testing.T, n *atomic.Int32, atLeast int32, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d reloads, want at least %d", what, n.Load(), atLeast)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReloadsOnChangesToADirectoryThatAppearsLater(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "conf")
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Run(ctx, dir, 20*time.Millisecond, time.Hour, slog.New(slog.DiscardHandler), func() { n.Add(1) })
	waitCount(t, &n, 1, "initial reload")

	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &n, 2, "directory created")
	before := n.Load()
	os.WriteFile(filepath.Join(dir, "a"), []byte("1"), 0o600)
	waitCount(t, &n, before+1, "file written")
}

func TestFollowsASymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	for _, gen := range []string{"..v1", "..v2"} {
		os.Mkdir(filepath.Join(dir, gen), 0o700)
		os.WriteFile(filepath.Join(dir, gen, "config"), []byte(gen), 0o600)
	}
	os.Symlink("..v1", filepath.Join(dir, "..data"))
	os.Symlink("..data/config", filepath.Join(dir, "config"))

	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Run(ctx, dir, 20*time.Millisecond, time.Hour, slog.New(slog.DiscardHandler), func() { n.Add(1) })
	waitCount(t, &n, 1, "initial reload")

	// Kubernetes' atomic update: a new ..data link renamed over the old one.
	os.Symlink("..v2", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &n, 2, "..data swapped")
}

func TestResyncsWithoutEvents(t *testing.T) {
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Run(ctx, t.TempDir(), time.Hour, 20*time.Millisecond, slog.New(slog.DiscardHandler), func() { n.Add(1) })
	waitCount(t, &n, 3, "periodic resync")
}

func TestCoalescesABurstOfWrites(t *testing.T) {
	dir := t.TempDir()
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const debounce = 300 * time.Millisecond
	go Run(ctx, dir, debounce, time.Hour, slog.New(slog.DiscardHandler), func() { n.Add(1) })
	waitCount(t, &n, 1, "initial reload")

	for i := range 10 {
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(t, &n, 2, "burst written")
	time.Sleep(2 * debounce)
	if got := n.Load(); got != 2 {
		t.Fatalf("%d reloads after one burst of writes, want 1", got-1)
	}
}

// A ConfigMap update as the kubelet writes it, with the default debounce:
// the last reload sees the new content.
func TestDefaultDebounceSeesTheWholeConfigMapUpdate(t *testing.T) {
	dir := t.TempDir()
	writeGen := func(gen string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, gen), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, gen, "config"), []byte(gen), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeGen("..v1")
	os.Symlink("..v1", filepath.Join(dir, "..data"))
	os.Symlink("..data/config", filepath.Join(dir, "config"))

	var last atomic.Pointer[string]
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Run(ctx, dir, DefaultDebounce, time.Hour, slog.New(slog.DiscardHandler), func() {
		b, _ := os.ReadFile(filepath.Join(dir, "config"))
		s := string(b)
		last.Store(&s)
		n.Add(1)
	})
	waitCount(t, &n, 1, "initial reload")

	writeGen("..v2")
	os.Symlink("..v2", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, "..v1"))
	deadline := time.Now().Add(5 * time.Second)
	for p := last.Load(); p == nil || *p != "..v2"; p = last.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("last reload read %q, want ..v2", *p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
