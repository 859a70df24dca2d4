package interop

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/nodeagent/caclient/providers/citadel"
	"istio.io/istio/security/pkg/pki/util"

	"github.com/bulwark-mesh/bulwark/internal/loadgen"
	"github.com/bulwark-mesh/bulwark/internal/proccpu"
)

// BenchmarkCAServer drives Istio's CA server and Bulwark's istiod with the
// same load in the same run: caBenchAgents agents, each a citadel client
// (pilot-agent's own CA client) on its own TLS connection with
// caBenchInFlight requests in flight, each request a pilot-agent-style
// RSA-2048 CSR for the agent's identity, and every answer checked (the
// leaf names the identity, holds the CSR's key and verifies to the trust
// bundle). Each agent authenticates by its own RS256 service-account token
// (auth=jwt), or by a client certificate the server's CA issued
// (auth=clientcert). Both servers run as processes of their own, and their
// CPU time is read from /proc/<pid>/stat before and after the measured
// calls. Run it with
//
//	ISTIOD_BIN=../../bin/istiod go test -short -run '^$' -bench CAServer -benchtime 5000x .
//
// (without -short, TestMain builds istiod itself).
func BenchmarkCAServer(b *testing.B) {
	silenceIstioLogs()
	iss := startIssuerAlg(b, jose.RS256)
	agents := newBenchAgents(b, caBenchAgents)
	targets := []struct {
		name  string
		start func(b *testing.B) caBenchTarget
	}{
		{"istio-rsa", func(b *testing.B) caBenchTarget { return istioTarget(b, "rsa-2048", iss, agents) }},
		{"istio-ecdsa", func(b *testing.B) caBenchTarget { return istioTarget(b, "ecdsa-p256", iss, agents) }},
		{"bulwark-ecdsa", func(b *testing.B) caBenchTarget { return bulwarkTarget(b, "ecdsa-p256", iss, agents) }},
	}
	for _, target := range targets {
		b.Run("target="+target.name, func(b *testing.B) {
			srv := target.start(b)
			for _, auth := range []string{"jwt", "clientcert"} {
				b.Run("auth="+auth, func(b *testing.B) {
					clients := make([]*citadel.CitadelClient, len(agents))
					for i, a := range agents {
						clients[i] = srv.client(b, a, auth, iss)
					}
					measureCA(b, srv, agents, clients)
				})
			}
		})
	}
}

const (
	caBenchAgents   = 10
	caBenchInFlight = 50
)

// benchAgent is one agent's identity and its CSR.
type benchAgent struct {
	sa     string
	id     string
	csrPEM []byte
	pub    crypto.PublicKey
}

func newBenchAgents(b *testing.B, n int) []benchAgent {
	agents := make([]benchAgent, n)
	for i := range agents {
		sa := "agent-" + strconv.Itoa(i)
		id := fmt.Sprintf("spiffe://%s/ns/bench/sa/%s", trustDomain, sa)
		// What pilot-agent sends by default: an RSA 2048 key, the SPIFFE
		// ID as the URI SAN.
		csrPEM, _, err := util.GenCSR(util.CertOptions{Host: id, RSAKeySize: 2048})
		if err != nil {
			b.Fatalf("csr: %v", err)
		}
		block, _ := pem.Decode(csrPEM)
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			b.Fatalf("parse own csr: %v", err)
		}
		agents[i] = benchAgent{sa: sa, id: id, csrPEM: csrPEM, pub: csr.PublicKey}
	}
	return agents
}

// caBenchTarget is a running CA server: its process, its trust bundle and
// one client certificate per agent.
type caBenchTarget struct {
	pid      int
	addr     string
	rootFile string
	roots    *x509.CertPool
	certs    map[string]mintedCert // by service account
}

func istioTarget(b *testing.B, keyType string, iss *oidcIssuer, agents []benchAgent) caBenchTarget {
	s := startIstioCA(b, keyType, iss)
	t := caBenchTarget{pid: s.Pid(), addr: s.Addr, rootFile: s.RootFile, certs: map[string]mintedCert{}}
	for _, a := range agents {
		t.certs[a.sa] = s.MintCert(b, "bench", a.sa)
	}
	t.roots = rootPool(b, t.rootFile)
	return t
}

func bulwarkTarget(b *testing.B, keyType string, iss *oidcIssuer, agents []benchAgent) caBenchTarget {
	args := append(iss.IstiodArgs(b, caAudience), "--ca-key-type", keyType, "--csr-rate-limit", "0")
	p := startIstiod(b, args...)
	t := caBenchTarget{pid: p.Pid(), addr: p.SecureGRPCAddr, certs: map[string]mintedCert{}}
	for _, a := range agents {
		t.certs[a.sa] = p.MintCert(b, "bench", a.sa)
		t.rootFile = t.certs[a.sa].Root
	}
	t.roots = rootPool(b, t.rootFile)
	return t
}

func rootPool(b *testing.B, file string) *x509.CertPool {
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		b.Fatalf("no root certificate in %s", file)
	}
	return pool
}

// client is a citadel client for agent a, authenticated by auth.
func (t caBenchTarget) client(b *testing.B, a benchAgent, auth string, iss *oidcIssuer) *citadel.CitadelClient {
	opts := &security.Options{CAEndpoint: t.addr, CAEndpointSAN: caSAN, ClusterID: clusterID}
	tlsOpts := &citadel.TLSOptions{RootCert: t.rootFile}
	switch auth {
	case "jwt":
		opts.CredFetcher = staticToken(iss.Token(b, "bench", a.sa))
	case "clientcert":
		tlsOpts.Cert, tlsOpts.Key = t.certs[a.sa].CertChain, t.certs[a.sa].Key
	}
	c, err := citadel.NewCitadelClient(opts, tlsOpts)
	if err != nil {
		b.Fatalf("citadel client: %v", err)
	}
	b.Cleanup(c.Close)
	return c
}

// measureCA runs b.N requests after a warm-up of one request per worker
// (every connection handshakes, the servers fetch the issuer's keys), and
// reports throughput, latency percentiles and the server's CPU per
// certificate.
func measureCA(b *testing.B, srv caBenchTarget, agents []benchAgent, clients []*citadel.CitadelClient) {
	call := func(worker, _ int) error {
		i := worker % len(clients)
		chain, err := clients[i].CSRSign(agents[i].csrPEM, int64(certTTL/time.Second))
		if err != nil {
			return err
		}
		return checkBenchChain(chain, agents[i], srv.roots)
	}
	workers := len(clients) * caBenchInFlight
	if _, err := loadgen.Run(workers, workers, call); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	cpuBefore := cpuOf(b, srv.pid)
	b.ResetTimer()
	start := time.Now()
	lat, err := loadgen.Run(workers, b.N, call)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuOf(b, srv.pid) - cpuBefore
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "certs/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "server-cpu-ms/cert")
	b.ReportMetric(float64(loadgen.Quantile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(loadgen.Quantile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

func cpuOf(b *testing.B, pid int) time.Duration {
	d, err := proccpu.Of(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// checkBenchChain checks an answer as an agent relies on it: the leaf names
// a's identity alone, holds a's key and verifies, through the chain's
// intermediates, to the server's trust bundle.
func checkBenchChain(chain []string, a benchAgent, roots *x509.CertPool) error {
	if len(chain) < 2 {
		return fmt.Errorf("chain of %d elements", len(chain))
	}
	var certs []*x509.Certificate
	for _, elem := range chain {
		rest := []byte(elem)
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return fmt.Errorf("parse chain: %w", err)
			}
			certs = append(certs, c)
		}
	}
	if len(certs) < 2 {
		return errors.New("chain holds fewer than two certificates")
	}
	leaf := certs[0]
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != a.id {
		return fmt.Errorf("leaf names %v, want %s", leaf.URIs, a.id)
	}
	if pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(a.pub) {
		return errors.New("leaf does not hold the CSR's key")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return fmt.Errorf("verify leaf: %w", err)
	}
	return nil
}
