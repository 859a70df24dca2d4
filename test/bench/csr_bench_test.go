// Package bench measures istiod end to end: a real istiod process and
// concurrent gRPC clients over TLS, as Istio's agents would load it.
package bench

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	pb "istio.io/api/security/v1alpha1"

	"github.com/bulwark-mesh/bulwark/internal/loadgen"
	"github.com/bulwark-mesh/bulwark/internal/proccpu"
)

// clients is the number of concurrent agents, each on its own connection.
const clients = 64

func BenchmarkCreateCertificate(b *testing.B) {
	bin := istiodBinary(b)
	for _, keyType := range []string{"ecdsa-p256", "rsa-2048"} {
		b.Run("ca="+keyType, func(b *testing.B) {
			srv := start(b, bin, "--ca-key-type", keyType, "--csr-rate-limit", "0")
			srv.mint(b, bin)
			conns := make([]pb.IstioCertificateServiceClient, clients)
			for i := range conns {
				conns[i] = srv.client(b)
			}
			csrs := make([]string, clients)
			for i := range csrs {
				csrs[i] = newCSR(b)
			}
			measure(b, srv, clients, func(i, _ int) error {
				_, err := conns[i].CreateCertificate(context.Background(),
					&pb.IstioCertificateRequest{Csr: csrs[i], ValidityDuration: 3600})
				return err
			})
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// measure runs n calls after a warm-up and reports throughput, the server's
// CPU per call and latency percentiles.
func measure(b *testing.B, srv *server, clients int, call func(client, j int) error) {
	if _, err := loadgen.Run(clients, clients, call); err != nil { // warm up: every connection handshakes once
		b.Fatalf("call: %v", err)
	}
	cpuBefore := srv.cpuTime(b)
	b.ResetTimer()
	start := time.Now()
	lat, err := loadgen.Run(clients, b.N, call)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("call: %v", err)
	}
	cpu := srv.cpuTime(b) - cpuBefore

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "certs/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "server-cpu-ms/cert")
	b.ReportMetric(ms(loadgen.Quantile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(loadgen.Quantile(lat, 0.99)), "p99-ms")
}

// istiodBinary is $ISTIOD_BIN, or istiod built into a temp dir.
func istiodBinary(b *testing.B) string {
	if p := os.Getenv("ISTIOD_BIN"); p != "" {
		return p
	}
	out := filepath.Join(b.TempDir(), "istiod")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/istiod")
	cmd.Dir = "../.."
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build istiod: %v\n%s", err, o)
	}
	return out
}

type server struct {
	cmd        *exec.Cmd
	addr       string
	monitoring string
	state      string
	creds      string
	log        *bytes.Buffer
}

func start(b *testing.B, bin string, extra ...string) *server {
	b.Helper()
	addrs := freeAddrs(b, 4)
	s := &server{addr: addrs[0], monitoring: addrs[2], log: new(bytes.Buffer), state: filepath.Join(b.TempDir(), "state")}
	httpAddr := addrs[1]
	args := append([]string{"discovery", "--state-dir", s.state, "--secureGRPCAddr", s.addr,
		"--httpAddr", httpAddr, "--monitoringAddr", s.monitoring, "--httpsAddr", addrs[3], "--log-level", "warn"}, extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("istiod not ready:\n%s", s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// mint issues the benchmark's client certificate from a local-mode CA.
func (s *server) mint(b *testing.B, bin string) {
	b.Helper()
	s.creds = filepath.Join(b.TempDir(), "creds")
	mint := exec.Command(bin, "mint-cert", "--state-dir", s.state, "--namespace", "bench",
		"--service-account", "load", "--out-dir", s.creds)
	if o, err := mint.CombinedOutput(); err != nil {
		b.Fatalf("mint-cert: %v\n%s", err, o)
	}
}

func (s *server) client(b *testing.B) pb.IstioCertificateServiceClient {
	b.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(s.creds, "cert-chain.pem"), filepath.Join(s.creds, "key.pem"))
	if err != nil {
		b.Fatal(err)
	}
	rootPEM, err := os.ReadFile(filepath.Join(s.creds, "root-cert.pem"))
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: roots, ServerName: "istiod.istio-system.svc", Certificates: []tls.Certificate{cert},
	})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// cpuTime is the server's user+system CPU time.
func (s *server) cpuTime(b *testing.B) time.Duration {
	b.Helper()
	d, err := proccpu.Of(s.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func newCSR(b *testing.B) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		b.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago, all different: each is held until every one is found.
func freeAddrs(b *testing.B, n int) []string {
	b.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out
}
