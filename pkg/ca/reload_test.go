package ca

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// runCA starts c.Run and returns a channel of reload results. It returns once
// the watch is set up (the first reload is done); the CA is stopped when the
// test ends.
func runCA(t *testing.T, c *CA) <-chan error {
	t.Helper()
	reloads := make(chan error, 256)
	c.onReloadDone = func(err error) {
		select {
		case reloads <- err:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v; want nil after cancel", err)
		}
	})
	select {
	case <-reloads:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not start watching")
	}
	return reloads
}

// waitReload waits up to 5s for a reload whose result satisfies want.
func waitReload(t *testing.T, reloads <-chan error, what string, want func(error) bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-reloads:
			if want(err) {
				return
			}
		case <-deadline:
			t.Fatalf("timed out waiting for a reload that %s", what)
		}
	}
}

func reloadFailed(err error) bool { return err != nil }

func watchConfig(dir string) func(*Config) {
	return func(cfg *Config) {
		cfg.CACertsDir = dir
		cfg.ReloadDebounce = 10 * time.Millisecond
		cfg.ResyncInterval = time.Hour // only file events trigger reloads
	}
}

// nextBundle waits up to 5s for a bundle on updates.
func nextBundle(t *testing.T, updates <-chan *Bundle) *Bundle {
	t.Helper()
	select {
	case b := <-updates:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("no new bundle")
		return nil
	}
}

func signedBy(t *testing.T, c *CA, issuer *x509.Certificate) bool {
	t.Helper()
	iss, err := c.Sign(workloadRequest(t, 0))
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return iss.Leaf.CheckSignatureFrom(issuer) == nil
}

func TestReloadReplacesTheSignerWithAValidSet(t *testing.T) {
	dir := t.TempDir()
	first, _ := pluggedIn(t)
	catest.WriteCACerts(t, dir, first)
	c := newTestCA(t, watchConfig(dir))
	mustLoad(t, c)
	updates, cancel := c.Subscribe()
	defer cancel()
	if b := nextBundle(t, updates); b.Version != 1 {
		t.Fatalf("first bundle version %d", b.Version)
	}
	runCA(t, c)

	second, root2 := pluggedIn(t)
	catest.WriteCACerts(t, dir, second)
	eventually(t, "the new signer", func() bool { return c.SigningCert().Equal(second.Signing.Cert) })
	if !signedBy(t, c, second.Signing.Cert) {
		t.Error("Sign does not use the new signer")
	}
	var b *Bundle
	for b == nil || b.Version < c.Current().Version {
		b = nextBundle(t, updates)
	}
	if b.Version < 2 || len(b.Roots) != 1 || !b.Roots[0].Equal(root2.Cert) {
		t.Errorf("subscriber got version %d; want a later version holding the new root", b.Version)
	}
}

func TestReloadKeepsTheSignerWhenTheNewSetIsBad(t *testing.T) {
	past := time.Now().Add(-48 * time.Hour)
	tests := map[string]func(t *testing.T, good catest.CACerts) map[string][]byte{
		"a key that does not match": func(t *testing.T, good catest.CACerts) map[string][]byte {
			return map[string][]byte{FileCAKey: catest.KeyPEM(t, catest.NewKey(t))}
		},
		"an expired signing certificate": func(t *testing.T, good catest.CACerts) map[string][]byte {
			root := catest.NewRoot(t)
			return catest.CACerts{Roots: []*catest.Cert{root}, Signing: catest.NewIntermediate(t, root,
				catest.WithValidity(past, past.Add(time.Hour)))}.Files()
		},
		"a half-written certificate": func(t *testing.T, good catest.CACerts) map[string][]byte {
			return map[string][]byte{FileCACert: good.Signing.CertPEM[:len(good.Signing.CertPEM)/2]}
		},
		"roots that do not match": func(t *testing.T, good catest.CACerts) map[string][]byte {
			return map[string][]byte{FileRootCert: catest.NewRoot(t).CertPEM}
		},
		"an intermediate whose extended key usage is codeSigning": func(t *testing.T, good catest.CACerts) map[string][]byte {
			root := catest.NewRoot(t)
			inter := catest.NewIntermediate(t, root, catest.WithExtKeyUsage(x509.ExtKeyUsageCodeSigning))
			return catest.CACerts{Signing: catest.NewIntermediate(t, inter), Intermediates: []*catest.Cert{inter},
				Roots: []*catest.Cert{root}}.Files()
		},
	}
	for name, bad := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			good, _ := pluggedIn(t)
			catest.WriteCACerts(t, dir, good)
			c := newTestCA(t, watchConfig(dir))
			mustLoad(t, c)
			reloads := runCA(t, c)

			catest.WriteFiles(t, dir, bad(t, good))
			waitReload(t, reloads, "rejects the set", reloadFailed)
			if !c.SigningCert().Equal(good.Signing.Cert) || c.Current().Version != 1 {
				t.Fatalf("signer or bundle changed after a bad set (version %d)", c.Current().Version)
			}
			if !signedBy(t, c, good.Signing.Cert) {
				t.Error("Sign does not use the old signer")
			}
		})
	}
}

func TestReloadSwitchesFromSelfSignedToPluggedIn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cacerts") // does not exist yet
	c := newTestCA(t, watchConfig(dir))
	mustLoad(t, c)
	selfSigned := c.SigningCert()
	runCA(t, c)

	set, root := pluggedIn(t)
	catest.WriteCACerts(t, dir, set)
	eventually(t, "the plugged-in signer", func() bool { return c.SigningCert().Equal(set.Signing.Cert) })
	if b := c.Current(); b.Version < 2 || !b.Roots[0].Equal(root.Cert) || b.Roots[0].Equal(selfSigned) {
		t.Errorf("bundle version %d does not hold the plugged-in root", b.Version)
	}
}

func TestReloadFollowsAKubernetesSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	first, _ := pluggedIn(t)
	writeAtomicWriterDir(t, dir, "..2026_01_01_00_00_00.000000001", first.Files())
	for _, name := range []string{FileCACert, FileCAKey, FileCertChain, FileRootCert} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	c := newTestCA(t, watchConfig(dir))
	mustLoad(t, c)
	if !c.SigningCert().Equal(first.Signing.Cert) {
		t.Fatal("did not load the set behind the symlinks")
	}
	runCA(t, c)

	second, _ := pluggedIn(t)
	writeAtomicWriterDir(t, dir, "..2026_01_01_00_05_00.000000002", second.Files())
	eventually(t, "the signer behind the new ..data", func() bool { return c.SigningCert().Equal(second.Signing.Cert) })
	if !signedBy(t, c, second.Signing.Cert) {
		t.Error("Sign does not use the new signer")
	}
}

// writeAtomicWriterDir does what the kubelet does to update a Secret volume:
// write a new timestamped directory, point ..data_tmp at it, rename
// ..data_tmp over ..data, and remove the old directory.
func writeAtomicWriterDir(t *testing.T, dir, ts string, files map[string][]byte) {
	t.Helper()
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	catest.WriteFiles(t, filepath.Join(dir, ts), files)
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReloadKeepsServingWhenTheFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	set, _ := pluggedIn(t)
	catest.WriteCACerts(t, dir, set)
	c := newTestCA(t, watchConfig(dir))
	mustLoad(t, c)
	reloads := runCA(t, c)

	for name := range set.Files() {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	waitReload(t, reloads, "sees the files gone", func(err error) bool {
		_, found, _ := readCACerts(dir)
		return err == nil && !found
	})
	if !c.Ready() || !c.SigningCert().Equal(set.Signing.Cert) || c.Current().Version != 1 {
		t.Error("CA stopped serving the plugged-in signer after its files were removed")
	}
	if !signedBy(t, c, set.Signing.Cert) {
		t.Error("Sign does not use the current signer")
	}
}

func TestResyncFindsADirectoryThatCouldNotBeWatched(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "missing-parent")
	dir := filepath.Join(parent, "cacerts")
	c := newTestCA(t, func(cfg *Config) {
		watchConfig(dir)(cfg)
		cfg.ResyncInterval = 20 * time.Millisecond
	})
	mustLoad(t, c)
	runCA(t, c)

	set, _ := pluggedIn(t)
	catest.WriteCACerts(t, dir, set)
	eventually(t, "the plugged-in signer", func() bool { return c.SigningCert().Equal(set.Signing.Cert) })
}

func TestReloadChecksValidityWithTheInjectedClock(t *testing.T) {
	dir := t.TempDir()
	first, _ := pluggedIn(t)
	catest.WriteCACerts(t, dir, first)
	clock := catest.NewClock(time.Now())
	c := newTestCA(t, func(cfg *Config) {
		watchConfig(dir)(cfg)
		cfg.Clock = clock.Now
	})
	mustLoad(t, c)
	reloads := runCA(t, c)

	// Valid by the wall clock, but the CA's clock is two years ahead.
	clock.Advance(2 * 365 * 24 * time.Hour)
	second, _ := pluggedIn(t)
	catest.WriteCACerts(t, dir, second)
	waitReload(t, reloads, "rejects a set expired by the CA's clock", reloadFailed)
	if !c.SigningCert().Equal(first.Signing.Cert) {
		t.Error("a set expired by the injected clock replaced the signer")
	}
}

func TestRunWithoutACACertsDirWaitsForCancel(t *testing.T) {
	c := newTestCA(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	eventually(t, "a signer", c.Ready)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunFailsOnABadPluggedInSet(t *testing.T) {
	dir := t.TempDir()
	catest.WriteFiles(t, dir, map[string][]byte{FileCACert: []byte("junk")})
	c := newTestCA(t, watchConfig(dir))
	if err := c.Run(context.Background()); err == nil {
		t.Error("Run succeeded with a partial plugged-in set")
	}
}

func TestResyncOfAnUnchangedSetPublishesNothing(t *testing.T) {
	dir := t.TempDir()
	set, _ := pluggedIn(t)
	catest.WriteCACerts(t, dir, set)
	c := newTestCA(t, func(cfg *Config) {
		watchConfig(dir)(cfg)
		cfg.ResyncInterval = 5 * time.Millisecond
	})
	mustLoad(t, c)
	updates, cancel := c.Subscribe()
	defer cancel()
	<-updates
	reloads := runCA(t, c)
	for range 5 {
		waitReload(t, reloads, "succeeds", func(err error) bool { return err == nil })
	}
	select {
	case b := <-updates:
		t.Errorf("resync of the same set published bundle %d", b.Version)
	default:
	}
	if v := c.Current().Version; v != 1 {
		t.Errorf("version %d; want 1", v)
	}
}
