package e2e

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
)

func TestMintedClientCertGetsWorkloadCertificate(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	p := startIstiod(t, state)
	demo := mint(t, state, "default", "demo")

	const id = "spiffe://cluster.local/ns/default/sa/demo"
	resp, err := p.dial(demo, true).CreateCertificate(ctx(t), &pb.IstioCertificateRequest{Csr: newCSR(t, id), ValidityDuration: 3600})
	if err != nil {
		t.Fatalf("CreateCertificate: %v", err)
	}
	leaf, roots, inter := parseChain(t, resp.CertChain)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id {
		t.Errorf("URI SANs = %v, want [%s]", leaf.URIs, id)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("issued chain does not verify: %v", err)
	}
	// istiod's output reaches the test through a pipe: the line may trail the response.
	waitFor(t, func() error {
		if log := p.log.String(); !strings.Contains(log, "certificate issued") || !strings.Contains(log, id) {
			return fmt.Errorf("no issuance log line naming %s", id)
		}
		return nil
	})
	resp2, err := http.Get("http://" + p.metrics + "/debug/syncz")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK || !strings.Contains(resp2.Header.Get("Content-Type"), "json") {
		t.Errorf("/debug/syncz from loopback: %d %s", resp2.StatusCode, resp2.Header.Get("Content-Type"))
	}
	// istioctl version reads /version on the monitoring port.
	resp3, err := http.Get("http://" + p.metrics + "/version")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ClientVersion struct {
			Version       string `json:"version"`
			GolangVersion string `json:"golang_version"`
		} `json:"clientVersion"`
	}
	err = json.NewDecoder(resp3.Body).Decode(&v)
	resp3.Body.Close()
	if err != nil || v.ClientVersion.Version == "" || v.ClientVersion.GolangVersion == "" {
		t.Errorf("/version: %+v, %v", v, err)
	}
	metrics := scrape(t, p.metrics)
	for _, name := range []string{
		"citadel_server_csr_count 1", "citadel_server_success_cert_issuance_count 1",
		"citadel_server_root_cert_expiry_timestamp", "citadel_server_cert_chain_expiry_timestamp",
		"citadel_server_csr_sign_duration_seconds_bucket",
	} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
}

func TestCallersWithoutValidCredentialsAreRefused(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	p := startIstiod(t, state)
	demo := mint(t, state, "default", "demo")

	tests := map[string]struct {
		withCert bool
		csr      string
		code     codes.Code
	}{
		"no credentials at all": {
			withCert: false, csr: newCSR(t), code: codes.Unauthenticated,
		},
		"another namespace's identity": {
			withCert: true, csr: newCSR(t, "spiffe://cluster.local/ns/kube-system/sa/demo"), code: codes.PermissionDenied,
		},
		"a certificate instead of a csr": {
			withCert: true, csr: string(mustRead(t, demo.path("cert-chain.pem"))), code: codes.InvalidArgument,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := p.dial(demo, tc.withCert).CreateCertificate(ctx(t), &pb.IstioCertificateRequest{Csr: tc.csr})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
		})
	}
}

func TestStateDirIsPrivateAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	first := startIstiod(t, state)
	before := mint(t, state, "default", "demo")
	first.signal(syscall.SIGTERM)
	if code := first.exitCode(15 * time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}

	fi, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("state dir mode = %o, want 700", perm)
	}
	filepath.Walk(state, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.HasSuffix(path, "key.pem") && info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %o, want 600", path, info.Mode().Perm())
		}
		return nil
	})

	second := startIstiod(t, state)
	// The credentials minted before the restart still work: same root.
	if _, err := second.dial(before, true).CreateCertificate(ctx(t), &pb.IstioCertificateRequest{Csr: newCSR(t)}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

// mkcerts runs the sample-CA tool into dir and returns the intermediate's set.
func mkcerts(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "mkcerts"), "-out", dir, "-cluster", "c1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkcerts: %v\n%s", err, b)
	}
	return filepath.Join(dir, "c1")
}

func copySet(t *testing.T, from, to string, files ...string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		// Write beside, then rename, as a careful operator (or Kubernetes) does.
		tmp := filepath.Join(to, "."+f+".tmp")
		if err := os.WriteFile(tmp, mustRead(t, filepath.Join(from, f)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(to, f)); err != nil {
			t.Fatal(err)
		}
	}
}

var caFiles = []string{"ca-cert.pem", "ca-key.pem", "cert-chain.pem", "root-cert.pem"}

func TestPluggedInCAIsPickedUpWithoutRestart(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	cacerts := filepath.Join(state, "cacerts")
	p := startIstiod(t, state, "--root-rotation-grace=1s", "--root-rotation-tick=100ms")
	selfSigned := mustRead(t, mint(t, state, "default", "demo").path("root-cert.pem"))

	// Self-signed → plugged-in is a root rotation: once the grace has
	// passed (no proxy is connected to wait for), the new intermediate
	// signs; the self-signed root stays trusted while the certificate
	// minted above, which it signed, is valid.
	good := mkcerts(t, filepath.Join(t.TempDir(), "good"))
	copySet(t, good, cacerts, caFiles...)
	issuer := parseChainCert(t, mustRead(t, filepath.Join(good, "ca-cert.pem")))
	var plugged creds
	waitFor(t, func() error {
		plugged = mint(t, state, "default", "demo")
		return issuedBy(t, p, plugged, issuer)
	})
	bundle := string(mustRead(t, plugged.path("root-cert.pem")))
	if !strings.Contains(bundle, string(selfSigned)) || !strings.Contains(bundle, string(mustRead(t, filepath.Join(good, "root-cert.pem")))) {
		t.Errorf("the trust bundle during the rotation does not hold both roots:\n%s", bundle)
	}

	// A mismatched key is refused, logged, and the plugged-in signer keeps serving.
	other := mkcerts(t, filepath.Join(t.TempDir(), "other"))
	copySet(t, other, cacerts, "ca-key.pem")
	waitFor(t, func() error {
		if !strings.Contains(p.log.String(), "ca-key.pem") {
			return errors.New("the rejected set was not logged naming ca-key.pem")
		}
		return nil
	})
	if err := issuedBy(t, p, plugged, issuer); err != nil {
		t.Fatalf("after a bad update: %v", err)
	}
}

// issuedBy asks istiod for a certificate with c and checks who signed it.
func issuedBy(t *testing.T, p *istiod, c creds, issuer *x509.Certificate) error {
	t.Helper()
	resp, err := p.dial(c, true).CreateCertificate(ctx(t), &pb.IstioCertificateRequest{Csr: newCSR(t)})
	if err != nil {
		return err
	}
	leaf, _, _ := parseChain(t, resp.CertChain)
	return leaf.CheckSignatureFrom(issuer)
}

// waitFor retries f for up to 10s.
func waitFor(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	err := f()
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		err = f()
	}
	if err != nil {
		t.Fatalf("not within 10s: %v", err)
	}
}

func parseChainCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	leaf, _, _ := parseChain(t, []string{string(pemBytes), string(pemBytes)})
	return leaf
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
