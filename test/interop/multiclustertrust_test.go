package interop

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/nodeagent/caclient/providers/citadel"
	"istio.io/istio/security/pkg/pki/util"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// istioRoot is a root CA as Istio's tools/certs make one, by Istio's
// certificate code.
type istioRoot struct {
	pem  []byte
	cert *x509.Certificate
	key  any
}

func newIstioRoot(t *testing.T) *istioRoot {
	t.Helper()
	certPEM, keyPEM, err := util.GenCertKeyFromOptions(util.CertOptions{
		TTL: 10 * 365 * 24 * time.Hour, Org: "Istio", IsCA: true, IsSelfSigned: true, RSAKeySize: 2048,
	})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := util.ParsePemEncodedCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, err := util.ParsePemEncodedKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &istioRoot{pem: certPEM, cert: cert, key: key}
}

// writeClusterCACerts writes into dir the cacerts of one cluster under
// root, as tools/certs' `make <cluster>-cacerts` does: an intermediate of
// its own (a CA for istiod.istio-system.svc), root-cert.pem, and the chain.
func (r *istioRoot) writeClusterCACerts(t *testing.T, dir string) {
	t.Helper()
	interPEM, interKeyPEM, err := util.GenCertKeyFromOptions(util.CertOptions{
		TTL: 2 * 365 * 24 * time.Hour, Org: "Istio", IsCA: true, RSAKeySize: 2048,
		SignerCert: r.cert, SignerPriv: r.key, Host: "istiod.istio-system.svc",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "root-cert.pem"), r.pem)
	writeFile(t, filepath.Join(dir, "ca-cert.pem"), interPEM)
	writeFile(t, filepath.Join(dir, "ca-key.pem"), interKeyPEM)
	writeFile(t, filepath.Join(dir, "cert-chain.pem"), append(append([]byte{}, interPEM...), r.pem...))
}

// TestTwoClustersOfOneRootTrustEachOther runs an istiod in each of two
// clusters, each plugged in with cacerts of one root and an intermediate
// of its own. A workload certificate issued by A's istiod verifies under
// B's ROOTCA (the istio-ca-root-cert B's istiod publishes), and B's
// istiod renews it for A's client certificate, with Istio's CA client; a
// client certificate of another root is refused.
func TestTwoClustersOfOneRootTrustEachOther(t *testing.T) {
	envA := testenv.Get(t)
	envB := testenv.StartPrivate(t)
	root, dir := newIstioRoot(t), t.TempDir()
	root.writeClusterCACerts(t, filepath.Join(dir, "cluster1"))
	root.writeClusterCACerts(t, filepath.Join(dir, "cluster2"))
	istiodA, nsA := envA.Namespace(t), envA.Namespace(t)
	istiodB, nsB := envB.Namespace(t), envB.Namespace(t)
	pA := startIstiod(t, "--kubeconfig", envA.Kubeconfig, "--namespace", istiodA, "--clusterID", clusterA,
		"--cacerts-dir", filepath.Join(dir, "cluster1"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))
	pB := startIstiod(t, "--kubeconfig", envB.Kubeconfig, "--namespace", istiodB, "--clusterID", clusterB,
		"--cacerts-dir", filepath.Join(dir, "cluster2"), "--inject-config-dir", filepath.Join(t.TempDir(), "inject"))
	rootA, rootB := publishedRoot(t, envA, nsA), publishedRoot(t, envB, nsB)
	a, b := readFile(t, rootA), readFile(t, rootB)
	if !bytes.Equal(a, b) || !bytes.Contains(a, bytes.TrimSpace(root.pem)) {
		t.Fatalf("the clusters' istio-ca-root-cert differ or are not the shared root:\nA:\n%s\nB:\n%s", a, b)
	}
	caA := caTarget{addr: pA.SecureGRPCAddr, root: rootA, san: "istiod." + istiodA + ".svc"}
	caB := caTarget{addr: pB.SecureGRPCAddr, root: rootB, san: "istiod." + istiodB + ".svc"}

	pod := createPod(t, envA, nsA, "demo-1", "demo")
	token := envA.ServiceAccountToken(t, nsA, "demo", []string{"istio-ca"}, pod)
	id := "spiffe://cluster.local/ns/" + nsA + "/sa/demo"
	csrPEM, keyPEM, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
	if err != nil {
		t.Fatal(err)
	}
	chainA, err := citadelClient(t, caA, token, "", "").CSRSign(csrPEM, int64(time.Hour/time.Second))
	if err != nil {
		t.Fatalf("A's istiod: %v", err)
	}
	certDir := t.TempDir()
	certFile, keyFile := filepath.Join(certDir, "cert-chain.pem"), filepath.Join(certDir, "key.pem")
	writeFile(t, certFile, []byte(strings.Join(chainA, "")))
	writeFile(t, keyFile, keyPEM)

	t.Run("a certificate of A's istiod verifies under B's ROOTCA", func(t *testing.T) {
		checkIssuedChain(t, chainA, id, csrPEM, rootB)
	})
	t.Run("B's istiod renews A's certificate for its client certificate", func(t *testing.T) {
		renewCSR, _, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
		if err != nil {
			t.Fatal(err)
		}
		chainB, err := citadelClient(t, caB, "", certFile, keyFile).CSRSign(renewCSR, int64(time.Hour/time.Second))
		if err != nil {
			t.Fatalf("B's istiod: %v", err)
		}
		checkIssuedChain(t, chainB, id, renewCSR, rootA)
		if strings.Join(chainB[1:], "") == strings.Join(chainA[1:], "") {
			t.Error("B's istiod issued under A's intermediate")
		}
	})
	t.Run("B's istiod refuses a client certificate of another root", func(t *testing.T) {
		other := newIstioRoot(t)
		certPEM, otherKey, err := util.GenCertKeyFromOptions(util.CertOptions{
			TTL: time.Hour, Host: id, IsClient: true, RSAKeySize: 2048, SignerCert: other.cert, SignerPriv: other.key,
		})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "cert.pem"), certPEM)
		writeFile(t, filepath.Join(dir, "key.pem"), otherKey)
		renewCSR, _, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
		if err != nil {
			t.Fatal(err)
		}
		_, err = citadelClient(t, caB, "", filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")).CSRSign(renewCSR, 3600)
		// The TLS handshake verifies a client certificate given against the
		// trust bundle: the refusal comes before any RPC.
		if err == nil || !strings.Contains(err.Error(), "code = Unavailable") && !strings.Contains(err.Error(), "code = Unauthenticated") {
			t.Fatalf("error = %v, want the certificate refused", err)
		}
		t.Logf("refused: %v", err)
	})
}

// citadelClient is Istio's CA client of ca, authenticated by token, or
// else by the client certificate and key of those files.
func citadelClient(t *testing.T, ca caTarget, token, certFile, keyFile string) *citadel.CitadelClient {
	t.Helper()
	opts := &security.Options{CAEndpoint: ca.addr, CAEndpointSAN: ca.san}
	if token != "" {
		opts.CredFetcher = staticToken(token)
	}
	client, err := citadel.NewCitadelClient(opts, &citadel.TLSOptions{RootCert: ca.root, Cert: certFile, Key: keyFile})
	if err != nil {
		t.Fatalf("NewCitadelClient: %v", err)
	}
	t.Cleanup(client.Close)
	return client
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
