package ca

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

var testTD = spiffeid.RequireTrustDomainFromString("cluster.local")

func testID(ns, sa string) spiffeid.ID {
	return spiffeid.RequireFromPath(testTD, "/ns/"+ns+"/sa/"+sa)
}

// rsa2048 is made once per test binary: RSA key generation is slow.
var rsa2048 = sync.OnceValue(func() crypto.Signer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// newTestCA makes a CA with a fresh DirStore; change lets a test adjust the
// config before New.
func newTestCA(t testing.TB, change func(*Config)) *CA {
	t.Helper()
	cfg := Config{
		TrustDomain: testTD,
		Store:       NewDirStore(t.TempDir()),
		Logger:      catest.Logger(t),
	}
	if change != nil {
		change(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func mustLoad(t testing.TB, c *CA) {
	t.Helper()
	if err := c.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
}

// pluggedIn returns a set root → intermediate that signs, valid now.
func pluggedIn(t testing.TB, opts ...catest.Option) (catest.CACerts, *catest.Cert) {
	t.Helper()
	root := catest.NewRoot(t)
	inter := catest.NewIntermediate(t, root, opts...)
	return catest.CACerts{Signing: inter, Roots: []*catest.Cert{root}}, root
}

// eventually polls cond until it holds or 5s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantErrIs(t testing.TB, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("error = %v; want one wrapping %v", err, want)
	}
}
