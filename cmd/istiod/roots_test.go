package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// rootsChildEnv marks the run of this test binary that has no system roots.
const rootsChildEnv = "BULWARK_TEST_NO_SYSTEM_ROOTS"

// publicChainTime is when the recorded public chain was valid.
var publicChainTime = time.Unix(1677615892, 0)

// TestBuiltInRootsVerifyAPublicChainWithoutSystemRoots runs this test binary
// again where the system has no roots, as in istiod's image, and verifies a
// recorded public chain there with the default roots: only the roots built
// into istiod can verify it.
func TestBuiltInRootsVerifyAPublicChainWithoutSystemRoots(t *testing.T) {
	if os.Getenv(rootsChildEnv) != "" {
		t.Skip("the parent runs this test")
	}
	empty := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestVerifyPublicChainWithDefaultRoots$", "-test.v")
	cmd.Env = append(os.Environ(), rootsChildEnv+"=1",
		"SSL_CERT_FILE="+filepath.Join(empty, "none.pem"), "SSL_CERT_DIR="+empty)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("without system roots: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestVerifyPublicChainWithDefaultRoots is the child of the test above.
func TestVerifyPublicChainWithDefaultRoots(t *testing.T) {
	if os.Getenv(rootsChildEnv) == "" {
		t.Skip("run by TestBuiltInRootsVerifyAPublicChainWithoutSystemRoots")
	}
	if _, err := verifyPublicChain(t, nil); err != nil {
		t.Fatalf("the recorded chain does not verify with the built-in roots: %v", err)
	}
}

func TestTheBuiltInBundleHoldsThePublicChainsRoot(t *testing.T) {
	pool := x509.NewCertPool()
	for r := range bundle.Roots() {
		c, err := x509.ParseCertificate(r.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		if r.Constraint != nil {
			pool.AddCertWithConstraint(c, r.Constraint)
		} else {
			pool.AddCert(c)
		}
	}
	chains, err := verifyPublicChain(t, pool)
	if err != nil {
		t.Fatal(err)
	}
	if root := chains[0][len(chains[0])-1]; root.Subject.CommonName != "GTS Root R1" {
		t.Errorf("verified to %s, want GTS Root R1", root.Subject)
	}
	if _, err := verifyPublicChain(t, x509.NewCertPool()); err == nil {
		t.Error("the chain verifies without its root")
	}
}

// verifyPublicChain verifies the recorded chain at the time it was valid,
// with roots, or the default roots when nil.
func verifyPublicChain(t *testing.T, roots *x509.CertPool) ([][]*x509.Certificate, error) {
	t.Helper()
	leaf := readCert(t, "leaf.pem")
	inter := x509.NewCertPool()
	inter.AddCert(readCert(t, "intermediate.pem"))
	return leaf.Verify(x509.VerifyOptions{
		DNSName:       "www.google.com",
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   publicChainTime,
	})
}

func readCert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "publicchain", name))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", name)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
