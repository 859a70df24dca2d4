package ca

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func keyOf(c *x509.Certificate) string { return hex.EncodeToString(c.SubjectKeyId) }

// SigningKey names, in every phase of two rotations, the key the CA
// loaded from the same state signs with.
func TestSigningKeyIsTheKeyThatSigns(t *testing.T) {
	rig := newRotationRig(t)
	ctx := context.Background()
	fresh := newTestCA(t, func(cfg *Config) { cfg.Store, cfg.Rotations = NewDirStore(rig.dir), NewDirRotationStore(rig.dir) })
	if k, err := fresh.SigningKey(ctx); err != nil || k.Cert != nil || k.Where != "" {
		t.Fatalf("before any key: %+v, %v", k, err)
	}
	store, rotation := "directory "+filepath.Join(rig.dir, dirStoreSet), "file "+filepath.Join(rig.dir, dirRotationFile)
	c := rig.replica("a", nil)
	check := func(phase Phase, where string) {
		t.Helper()
		k, err := c.SigningKey(ctx)
		if err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		if k.Phase != phase || k.Where != where || keyOf(k.Cert) != keyOf(c.SigningCert()) {
			t.Errorf("phase %q: SigningKey says %q in %s, phase %q; the CA signs with %s", phase, keyOf(k.Cert), k.Where, k.Phase, keyOf(c.SigningCert()))
		}
		if !k.Root.Equal(c.Current().Roots[0]) {
			t.Errorf("phase %q: SigningKey's root is not the first root of the bundle", phase)
		}
		c = rig.replica("a", nil) // a CA loaded afresh signs with it too
		if keyOf(k.Cert) != keyOf(c.SigningCert()) {
			t.Errorf("phase %q: a CA loaded from the state signs with %s, not %s", phase, keyOf(c.SigningCert()), keyOf(k.Cert))
		}
	}
	check(PhaseIdle, store)
	for _, outgoing := range []string{store, rotation + ", the old set"} {
		if _, err := c.Rotator().Request(ctx); err != nil {
			t.Fatal(err)
		}
		rig.tick(c, "a")
		check(PhasePrepare, outgoing)
		rig.clock.Advance(3 * time.Minute)
		rig.tick(c, "a")
		check(PhaseActivate, rotation+", the new set")
		rig.clock.Advance(2 * time.Hour)
		rig.tick(c, "a")
		check(PhaseIdle, rotation+", the new set")
	}
}

// ResetDir is refused while an istiod holds the state directory and
// changes nothing then; once it is let go, it deletes the rotation state
// and the set, and the next CA makes a new root whose key is none of the
// old ones.
func TestResetDirStartsOverOnceIstiodIsGone(t *testing.T) {
	rig := newRotationRig(t)
	ctx := context.Background()
	c := rig.replica("a", nil)
	original := keyOf(c.SigningCert())
	if _, err := c.Rotator().Request(ctx); err != nil {
		t.Fatal(err)
	}
	rig.tick(c, "a")
	rig.clock.Advance(3 * time.Minute)
	rig.tick(c, "a")
	rotated := keyOf(c.SigningCert())
	if rotated == original {
		t.Fatal("the rotation did not activate")
	}

	release, err := HoldDir(rig.dir)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(rig.dir, dirRotationFile))
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := ResetDir(ctx, rig.dir)
	wantErrIs(t, err, ErrIstiodRunning)
	if after, _ := os.ReadFile(filepath.Join(rig.dir, dirRotationFile)); len(deleted) > 0 || string(after) != string(before) {
		t.Fatalf("a refused reset deleted %v", deleted)
	}
	release()

	deleted, err = ResetDir(ctx, rig.dir)
	if want := []string{filepath.Join(rig.dir, dirRotationFile), filepath.Join(rig.dir, dirStoreSet)}; err != nil || !slices.Equal(deleted, want) {
		t.Fatalf("reset: deleted %v, %v; want %v", deleted, err, want)
	}
	c = rig.replica("b", nil)
	if k := keyOf(c.SigningCert()); k == original || k == rotated || len(c.Current().Roots) != 1 {
		t.Fatalf("after the reset the CA signs with %s (old keys %s, %s) and trusts %d roots", k, original, rotated, len(c.Current().Roots))
	}
	if deleted, err := ResetDir(ctx, filepath.Join(rig.dir, "none")); err != nil || len(deleted) != 0 {
		t.Errorf("reset of a directory that does not exist: %v, %v", deleted, err)
	}
}
