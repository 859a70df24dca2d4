package meshconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

// configMapDir lays files out as kubelet mounts a ConfigMap: each version
// in its own ..<n> directory, ..data a symbolic link to the current one,
// and each key a link through ..data. update swaps versions the way kubelet
// does, atomically: a new directory, a ..data_tmp link renamed over ..data,
// the old directory removed.
type configMapDir struct {
	t   *testing.T
	dir string
	n   int
}

func newConfigMapDir(t *testing.T, mesh string) *configMapDir {
	d := &configMapDir{t: t, dir: filepath.Join(t.TempDir(), "config")}
	if err := os.Mkdir(d.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d.update(mesh)
	if err := os.Symlink(filepath.Join("..data", "mesh"), filepath.Join(d.dir, "mesh")); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *configMapDir) path() string { return filepath.Join(d.dir, "mesh") }

func (d *configMapDir) update(mesh string) {
	d.t.Helper()
	old := fmt.Sprintf("..%d", d.n)
	d.n++
	version := fmt.Sprintf("..%d", d.n)
	if err := os.Mkdir(filepath.Join(d.dir, version), 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, version, "mesh"), []byte(mesh), 0o644); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(d.dir, old)); err != nil {
		d.t.Fatal(err)
	}
}

// startWatcher runs a watcher that relies on change notifications alone
// (the periodic re-read is an hour away), so a change seen is a change
// the watch caught.
func startWatcher(t *testing.T, cfg WatcherConfig) (*Watcher, <-chan *meshv1alpha1.MeshConfig, *logtest.Recorder) {
	t.Helper()
	rec, log := logtest.New(t)
	cfg.Logger, cfg.Resync = log, time.Hour
	if cfg.Defaults == (Defaults{}) {
		cfg.Defaults = testDefaults
	}
	w, err := NewWatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	updates, cancel := w.Subscribe()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done; cancel() })
	return w, updates, rec
}

func next(t *testing.T, updates <-chan *meshv1alpha1.MeshConfig) *meshv1alpha1.MeshConfig {
	t.Helper()
	select {
	case mc := <-updates:
		return mc
	case <-time.After(10 * time.Second):
		t.Fatal("no mesh configuration update")
		return nil
	}
}

// quiet waits until the log holds a line with parts, and checks that no
// update was announced meanwhile.
func quiet(t *testing.T, updates <-chan *meshv1alpha1.MeshConfig, rec *logtest.Recorder, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rec.Count(parts...) == 0 {
		select {
		case mc := <-updates:
			t.Fatalf("update %v announced, want none", Summary(mc))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q", parts)
		}
	}
}

func TestWatcherStartsFromTheInitialConfiguration(t *testing.T) {
	d := newConfigMapDir(t, "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
	w, err := NewWatcher(WatcherConfig{Path: d.path(), Defaults: testDefaults})
	if err != nil {
		t.Fatal(err)
	}
	if w.Current().GetOutboundTrafficPolicy().GetMode() != allowAny {
		t.Fatal("before Run, Current must be the initial configuration (the defaults)")
	}
}

func TestWatcherFollowsKubeletsSymlinkSwapAndKeepsTheLastGoodConfig(t *testing.T) {
	d := newConfigMapDir(t, "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
	w, updates, rec := startWatcher(t, WatcherConfig{Path: d.path()})
	if mc := next(t, updates); mc.GetOutboundTrafficPolicy().GetMode() != registryOnly {
		t.Fatalf("first read: mode %v, want REGISTRY_ONLY", mc.GetOutboundTrafficPolicy().GetMode())
	}

	d.update("outboundTrafficPolicy: {mode: ALLOW_ANY}\nenableAutoMtls: false\n")
	mc := next(t, updates)
	if mc.GetOutboundTrafficPolicy().GetMode() != allowAny || mc.GetEnableAutoMtls().GetValue() {
		t.Fatalf("after the swap: %v", Summary(mc))
	}

	d.update("outboundTrafficPolicy: [oops\n")
	quiet(t, updates, rec, "ERROR", "rejected", "not YAML")
	if w.Current() != mc {
		t.Fatal("a bad update replaced the configuration in force")
	}
	d.update("trustDomain: Not_Valid\n")
	quiet(t, updates, rec, "ERROR", "rejected", "trustDomain")
	if w.Current() != mc {
		t.Fatal("an invalid update replaced the configuration in force")
	}

	d.update("rootNamespace: mesh-root\n")
	if mc := next(t, updates); mc.GetRootNamespace() != "mesh-root" || mc.GetOutboundTrafficPolicy().GetMode() != allowAny || !mc.GetEnableAutoMtls().GetValue() {
		t.Fatalf("recovery: %v, want the new document over the defaults", Summary(mc))
	}
	if n := rec.Count("rejected", "not YAML"); n != 1 {
		t.Errorf("the bad update was logged %d times, want once", n)
	}
}

func TestWatcherKeepsTheTrustDomainItStartedWith(t *testing.T) {
	d := newConfigMapDir(t, "trustDomain: first.td\n")
	initial, _, err := ReadFile(d.path(), testDefaults)
	if err != nil {
		t.Fatal(err)
	}
	w, updates, rec := startWatcher(t, WatcherConfig{Path: d.path(), Initial: initial})
	d.update("trustDomain: second.td\ntrustDomainAliases: [first.td]\n")
	mc := next(t, updates)
	if mc.GetTrustDomain() != "first.td" || strings.Join(mc.GetTrustDomainAliases(), ",") != "first.td" {
		t.Fatalf("trust domain %q aliases %q: want first.td kept and the aliases applied", mc.GetTrustDomain(), mc.GetTrustDomainAliases())
	}
	if rec.Count("WARN", "another trust domain", "second.td") != 1 {
		t.Error("the ignored trust domain change was not logged")
	}
	if w.Current() != mc {
		t.Error("Current is not the announced configuration")
	}
}

func TestWatcherTakesTheDefaultsWhenTheFileIsMissing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.yaml")
	w, updates, _ := startWatcher(t, WatcherConfig{Path: path, Defaults: Defaults{TrustDomain: "cluster.local", RootNamespace: "bulwark"}})
	if w.Current().GetRootNamespace() != "bulwark" {
		t.Fatalf("root namespace %q, want the default given", w.Current().GetRootNamespace())
	}
	if err := os.WriteFile(path, []byte("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if mc := next(t, updates); mc.GetOutboundTrafficPolicy().GetMode() != registryOnly {
		t.Fatalf("a file that appears: %v", Summary(mc))
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if mc := next(t, updates); mc.GetOutboundTrafficPolicy().GetMode() != allowAny {
		t.Fatalf("a file that goes: %v, want the defaults", Summary(mc))
	}
}

func TestWatcherAppliesTheCallersCheck(t *testing.T) {
	d := newConfigMapDir(t, "enableAutoMtls: true\n")
	refuse := errors.New("refused by the injector's rules")
	_, updates, rec := startWatcher(t, WatcherConfig{Path: d.path(), Check: func(mc *meshv1alpha1.MeshConfig) error {
		if mc.GetDefaultConfig().GetInterceptionMode() == meshv1alpha1.ProxyConfig_TPROXY {
			return refuse
		}
		return nil
	}})
	d.update("defaultConfig: {interceptionMode: TPROXY}\noutboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
	quiet(t, updates, rec, "rejected", refuse.Error())
}

func TestReadFileRefusesWhatItCannotUse(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFile(big, testDefaults); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("an oversize file: err = %v", err)
	}
	if _, _, err := ReadFile(dir, testDefaults); err == nil {
		t.Error("a directory: no error")
	}
	if mc, _, err := ReadFile(filepath.Join(dir, "absent"), testDefaults); err != nil || mc.GetTrustDomain() != "cluster.local" {
		t.Errorf("a missing file: %v, %v; want the defaults", mc, err)
	}
	if _, err := NewWatcher(WatcherConfig{Path: big, Initial: &meshv1alpha1.MeshConfig{TrustDomain: "Bad TD"}}); err == nil {
		t.Error("NewWatcher took an invalid initial configuration")
	}
}
