// Package e2e runs the built istiod binary on its embedded default (local
// mode) and talks to it as Istio's agents do.
package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	pb "istio.io/api/security/v1alpha1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

// binDir holds the istiod and mkcerts binaries built once for this package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bulwark-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for _, pkg := range []string{"cmd/istiod", "certs/mkcerts"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, filepath.Base(pkg)), "./"+pkg)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// istiod is one running istiod process.
type istiod struct {
	t        *testing.T
	cmd      *exec.Cmd
	stateDir string
	grpc     string
	http     string
	metrics  string
	webhook  string
	log      *logtest.Buffer
	exited   chan struct{}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startIstiod runs istiod with stateDir and extra flags and waits for /ready.
func startIstiod(t *testing.T, stateDir string, extra ...string) *istiod {
	t.Helper()
	p := &istiod{t: t, stateDir: stateDir, grpc: freePort(t), http: freePort(t), metrics: freePort(t), webhook: freePort(t),
		log: new(logtest.Buffer), exited: make(chan struct{})}
	args := append([]string{"discovery", "--state-dir", stateDir,
		"--secureGRPCAddr", p.grpc, "--httpAddr", p.http, "--monitoringAddr", p.metrics, "--httpsAddr", p.webhook}, extra...)
	p.cmd = exec.Command(filepath.Join(binDir, "istiod"), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("istiod log:\n%s", p.log.String())
		}
	})
	p.waitReady()
	return p
}

func (p *istiod) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			p.t.Fatalf("istiod exited before ready:\n%s", p.log.String())
		default:
		}
		resp, err := http.Get("http://" + p.http + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("istiod not ready in 20s:\n%s", p.log.String())
}

// credentials are files as `istiod mint-cert` writes them.
type creds struct{ dir string }

func (c creds) path(name string) string { return filepath.Join(c.dir, name) }

// mint runs `istiod mint-cert` for ns/sa against stateDir.
func mint(t *testing.T, stateDir, ns, sa string) creds {
	t.Helper()
	out := filepath.Join(t.TempDir(), ns+"-"+sa)
	cmd := exec.Command(filepath.Join(binDir, "istiod"), "mint-cert", "--state-dir", stateDir,
		"--namespace", ns, "--service-account", sa, "--out-dir", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mint-cert: %v\n%s", err, b)
	}
	return creds{dir: out}
}

// dial connects to istiod's secure port as an agent does: verifying the
// serving certificate for istiod.istio-system.svc against root-cert.pem and
// presenting the client certificate when withCert.
func (p *istiod) dial(c creds, withCert bool) pb.IstioCertificateServiceClient {
	p.t.Helper()
	rootPEM, err := os.ReadFile(c.path("root-cert.pem"))
	if err != nil {
		p.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	cfg := &tls.Config{RootCAs: roots, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(c.path("cert-chain.pem"), c.path("key.pem"))
		if err != nil {
			p.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

func newCSR(t *testing.T, uris ...string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{}
	for _, u := range uris {
		parsed, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func parseChain(t *testing.T, chain []string) (leaf *x509.Certificate, roots *x509.CertPool, intermediates *x509.CertPool) {
	t.Helper()
	if len(chain) < 2 {
		t.Fatalf("chain of %d elements; Istio's agent needs at least 2", len(chain))
	}
	roots, intermediates = x509.NewCertPool(), x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(chain[len(chain)-1])) {
		t.Fatal("last chain element has no roots")
	}
	for i, p := range chain[:len(chain)-1] {
		block, _ := pem.Decode([]byte(p))
		if block == nil {
			t.Fatalf("chain element %d is not PEM", i)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			leaf = c
		} else {
			intermediates.AddCert(c)
		}
	}
	return leaf, roots, intermediates
}

func (p *istiod) signal(sig syscall.Signal) { p.cmd.Process.Signal(sig) }

func (p *istiod) exitCode(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		p.t.Fatalf("istiod did not exit in %v", timeout)
		return -1
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}
