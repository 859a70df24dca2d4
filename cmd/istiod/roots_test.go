package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// rootsChildEnv marks the run of this test binary that has no system roots.
const rootsChildEnv = "BULWARK_TEST_NO_SYSTEM_ROOTS"

// publicChainTime is when the recorded public chain was valid.
var publicChainTime = time.Unix(1677615892, 0)

// TestMain runs, in the child run of the test below, the verification
// where the system has no roots, and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv(rootsChildEnv) != "" {
		if _, err := verifyPublicChain(nil); err != nil {
			fmt.Fprintf(os.Stderr, "the recorded chain does not verify with the built-in roots: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("the recorded chain verifies with the built-in roots")
		os.Exit(0)
	}
	os.Exit(testenv.Run(m))
}

// TestBuiltInRootsVerifyAPublicChainWithoutSystemRoots runs this test binary
// again where the system has no roots, as in istiod's image, and verifies a
// recorded public chain there with the default roots: only the roots built
// into istiod can verify it.
func TestBuiltInRootsVerifyAPublicChainWithoutSystemRoots(t *testing.T) {
	empty := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), rootsChildEnv+"=1",
		"SSL_CERT_FILE="+filepath.Join(empty, "none.pem"), "SSL_CERT_DIR="+empty)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("without system roots: %v\n%s", err, out)
	}
	t.Logf("%s", out)
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
	chains, err := verifyPublicChain(pool)
	if err != nil {
		t.Fatal(err)
	}
	if root := chains[0][len(chains[0])-1]; root.Subject.CommonName != "GTS Root R1" {
		t.Errorf("verified to %s, want GTS Root R1", root.Subject)
	}
	if _, err := verifyPublicChain(x509.NewCertPool()); err == nil {
		t.Error("the chain verifies without its root")
	}
}

// verifyPublicChain verifies the recorded chain at the time it was valid,
// with roots, or the default roots when nil.
func verifyPublicChain(roots *x509.CertPool) ([][]*x509.Certificate, error) {
	leaf, err := readCert("leaf.pem")
	if err != nil {
		return nil, err
	}
	intermediate, err := readCert("intermediate.pem")
	if err != nil {
		return nil, err
	}
	inter := x509.NewCertPool()
	inter.AddCert(intermediate)
	return leaf.Verify(x509.VerifyOptions{
		DNSName:       "www.google.com",
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   publicChainTime,
	})
}

func readCert(name string) (*x509.Certificate, error) {
	b, err := os.ReadFile(filepath.Join("testdata", "publicchain", name))
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM", name)
	}
	return x509.ParseCertificate(block.Bytes)
}
