package ca

import (
	"context"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// SigningKeyOf, given a cacerts Secret's files, finds what SigningKey
// finds with the same files in CACertsDir, and refuses a set istiod would
// refuse to load.
func TestSigningKeyOfAgreesWithTheDirectory(t *testing.T) {
	ctx := context.Background()
	set, _ := pluggedIn(t)
	dir := t.TempDir()
	catest.WriteCACerts(t, dir, set)
	fromDir, err := newTestCA(t, func(c *Config) { c.CACertsDir = dir }).SigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCA(t, nil)
	for name, files := range map[string]map[string][]byte{"Istio's layout": set.Files(), "the TLS layout": set.TLSFiles()} {
		got, err := c.SigningKeyOf(ctx, files, "Secret istio-system/cacerts")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.KeyID() != fromDir.KeyID() || !got.Root.Equal(fromDir.Root) || got.Where != "the plugged-in set in Secret istio-system/cacerts" {
			t.Errorf("%s: key %s under %s in %q; the directory's %s under %s", name, got.KeyID(), got.Root.Subject, got.Where, fromDir.KeyID(), fromDir.Root.Subject)
		}
	}

	// Without a set, the Store's key; with none there either, no key.
	if k, err := c.SigningKeyOf(ctx, nil, "x"); err != nil || k.Cert != nil {
		t.Errorf("no set and an empty store: %+v, %v", k, err)
	}

	bad := set.Files()
	other, _ := pluggedIn(t)
	bad[FileCAKey] = other.Files()[FileCAKey]
	if _, err := c.SigningKeyOf(ctx, bad, "x"); err == nil || !strings.Contains(err.Error(), "cacerts") {
		t.Errorf("a set whose key is another certificate's: %v", err)
	}
	partial := set.Files()
	delete(partial, FileRootCert)
	if _, err := c.SigningKeyOf(ctx, partial, "x"); err == nil || !strings.Contains(err.Error(), FileRootCert) {
		t.Errorf("a partial set: %v", err)
	}
}
