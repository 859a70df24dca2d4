package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"istio.io/api/security/v1beta1"
	istiogrpc "istio.io/istio/pilot/pkg/grpc"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	istiokeepalive "istio.io/istio/pkg/keepalive"
	istiosecurity "istio.io/istio/pkg/security"
	istioxds "istio.io/istio/pkg/xds"
	istioca "istio.io/istio/security/pkg/pki/ca"
	"istio.io/istio/security/pkg/pki/util"
	istioserver "istio.io/istio/security/pkg/server/ca"
	"istio.io/istio/security/pkg/server/ca/authenticate"
)

// Istio's CA server, for the side-by-side benchmark, runs in a process of
// its own, as istiod's does, so that its CPU time is read from /proc just
// like istiod's and none of the load generator's is counted. The process is
// this test binary started again with istioCAServerEnv naming a directory
// that holds istioCAConfig and the files it names; TestMain hands it to
// runIstioCAServer before anything else happens.

// istioCAServerEnv names the directory of an Istio CA server to run.
const istioCAServerEnv = "BULWARK_INTEROP_ISTIO_CA_DIR"

// Files of an Istio CA server's directory.
const (
	istioCAConfigFile = "config.json"
	istioServingCert  = "serving-cert.pem"
	istioServingKey   = "serving-key.pem"
)

// istioCAConfig is what the server process reads from its directory.
type istioCAConfig struct {
	Addr string `json:"addr"`
	// JWTIssuer, JWKSURI and IssuerCAFile configure Istio's JWT
	// authenticator; empty JWTIssuer means client certificates only.
	JWTIssuer    string `json:"jwtIssuer,omitempty"`
	JWKSURI      string `json:"jwksURI,omitempty"`
	IssuerCAFile string `json:"issuerCAFile,omitempty"`
}

// istioCAServer is a running Istio CA server process.
type istioCAServer struct {
	Addr     string
	RootFile string // root-cert.pem
	proc     *process
	ca       *istioca.IstioCA
	dir      string
}

// startIstioCA makes a self-signed root of the given key type ("rsa-2048",
// Istio's default, or "ecdsa-p256") as Istio's self-signed CA makes its own,
// and runs Istio's CA gRPC server over it as Istio's istiod does: a
// plugged-in IstioCA, Istio's client-certificate authenticator then, when
// iss is not nil, its JWT authenticator for iss's tokens, Istio's gRPC
// server options and TLS settings for the secure port.
func startIstioCA(tb testing.TB, keyType string, iss *oidcIssuer) *istioCAServer {
	tb.Helper()
	dir := tb.TempDir()
	opts := util.CertOptions{
		TTL: 10 * 365 * 24 * time.Hour, Org: trustDomain, IsCA: true, IsSelfSigned: true, IsDualUse: true,
	}
	switch keyType {
	case "rsa-2048":
		opts.RSAKeySize = 2048
	case "ecdsa-p256":
		opts.ECSigAlg, opts.ECCCurve = util.EcdsaSigAlg, util.P256Curve
	default:
		tb.Fatalf("istio ca: key type %q", keyType)
	}
	certPEM, keyPEM, err := util.GenCertKeyFromOptions(opts)
	if err != nil {
		tb.Fatalf("istio ca root: %v", err)
	}
	writeFile(tb, filepath.Join(dir, "ca-cert.pem"), certPEM)
	writeFile(tb, filepath.Join(dir, "ca-key.pem"), keyPEM)
	writeFile(tb, filepath.Join(dir, "root-cert.pem"), certPEM)
	ca, err := loadIstioCA(dir)
	if err != nil {
		tb.Fatal(err)
	}
	servingCert, servingKey, err := ca.GenKeyCert([]string{caSAN}, 24*time.Hour, false)
	if err != nil {
		tb.Fatalf("istio ca serving certificate: %v", err)
	}
	writeFile(tb, filepath.Join(dir, istioServingCert), servingCert)
	writeFile(tb, filepath.Join(dir, istioServingKey), servingKey)

	cfg := istioCAConfig{Addr: freeAddrs(tb, 1)[0]}
	if iss != nil {
		cfg.JWTIssuer, cfg.JWKSURI, cfg.IssuerCAFile = iss.URL, iss.URL+"/jwks", iss.CAFile
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, filepath.Join(dir, istioCAConfigFile), raw)

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(isolatedEnv(), istioCAServerEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the benchmark
	s := &istioCAServer{Addr: cfg.Addr, RootFile: filepath.Join(dir, "root-cert.pem"), ca: ca, dir: dir}
	s.proc = startProcess(tb, "istio-ca-"+keyType, cmd)
	deadline := time.Now().Add(readyTimeout)
	for {
		conn, err := net.DialTimeout("tcp", cfg.Addr, time.Second)
		if err == nil {
			conn.Close()
			return s
		}
		if perr := s.proc.running(); perr != nil || time.Now().After(deadline) {
			tb.Fatalf("istio ca server not listening on %s: %v %v\n%s", cfg.Addr, err, perr, s.proc.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pid is the server process's id.
func (s *istioCAServer) Pid() int { return s.proc.cmd.Process.Pid }

// MintCert issues a client certificate for spiffe://cluster.local/ns/NS/sa/SA
// from the server's CA, in the layout of istiod's MintCert.
func (s *istioCAServer) MintCert(tb testing.TB, namespace, serviceAccount string) mintedCert {
	tb.Helper()
	id := fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, namespace, serviceAccount)
	csrPEM, keyPEM, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve})
	if err != nil {
		tb.Fatalf("client csr: %v", err)
	}
	certPEM, err := s.ca.Sign(csrPEM, istioca.CertOpts{SubjectIDs: []string{id}, TTL: time.Hour})
	if err != nil {
		tb.Fatalf("client certificate: %v", err)
	}
	out := filepath.Join(tb.TempDir(), "certs")
	if err := os.MkdirAll(out, 0o700); err != nil {
		tb.Fatal(err)
	}
	m := mintedCert{
		Dir:       out,
		CertChain: filepath.Join(out, "cert-chain.pem"),
		Key:       filepath.Join(out, "key.pem"),
		Root:      s.RootFile,
	}
	writeFile(tb, m.CertChain, certPEM)
	writeFile(tb, m.Key, keyPEM)
	return m
}

func writeFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// loadIstioCA loads the CA of dir as Istio loads a plugged-in CA.
func loadIstioCA(dir string) (*istioca.IstioCA, error) {
	opts, err := istioca.NewPluggedCertIstioCAOptions(istioca.SigningCAFileBundle{
		RootCertFile:    filepath.Join(dir, "root-cert.pem"),
		SigningCertFile: filepath.Join(dir, "ca-cert.pem"),
		SigningKeyFile:  filepath.Join(dir, "ca-key.pem"),
	}, 24*time.Hour, 90*24*time.Hour, 2048)
	if err != nil {
		return nil, fmt.Errorf("istio ca options: %w", err)
	}
	ca, err := istioca.NewIstioCA(opts)
	if err != nil {
		return nil, fmt.Errorf("istio ca: %w", err)
	}
	return ca, nil
}

// runIstioCAServer is the server process: it serves until SIGTERM and
// returns the exit code.
func runIstioCAServer(dir string) int {
	if err := serveIstioCA(dir); err != nil {
		fmt.Fprintln(os.Stderr, "istio ca server:", err)
		return 1
	}
	return 0
}

func serveIstioCA(dir string) error {
	raw, err := os.ReadFile(filepath.Join(dir, istioCAConfigFile))
	if err != nil {
		return err
	}
	var cfg istioCAConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	ca, err := loadIstioCA(dir)
	if err != nil {
		return err
	}
	authenticators := []istiosecurity.Authenticator{&authenticate.ClientCertAuthenticator{}}
	if cfg.JWTIssuer != "" {
		// go-oidc fetches the JWKS with the default client, as in istiod;
		// the test issuer's certificate is added to what it trusts.
		issuerCA, err := os.ReadFile(cfg.IssuerCAFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(issuerCA) {
			return errors.New("no issuer CA certificate")
		}
		http.DefaultTransport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool}
		jwt, err := authenticate.NewJwtAuthenticator(&v1beta1.JWTRule{
			Issuer: cfg.JWTIssuer, JwksUri: cfg.JWKSURI, Audiences: []string{caAudience},
		}, meshwatcher.NewTestWatcher(mesh.DefaultMeshConfig()))
		if err != nil {
			return err
		}
		authenticators = append(authenticators, jwt)
	}
	srv, err := istioserver.New(ca, 24*time.Hour, authenticators, nil)
	if err != nil {
		return err
	}
	serving, err := tls.LoadX509KeyPair(filepath.Join(dir, istioServingCert), filepath.Join(dir, istioServingKey))
	if err != nil {
		return err
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(ca.GetCAKeyCertBundle().GetRootCertPem())
	tlsCfg := &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    clientCAs,
		MinVersion:   tls.VersionTLS12,
	}
	opts := istiogrpc.ServerOptions(istiokeepalive.DefaultOption(), istioxds.RecordRecvSize, grpcprom.UnaryServerInterceptor)
	opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	gs := grpc.NewServer(opts...)
	srv.Register(gs)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		gs.Stop()
	}()
	return gs.Serve(ln)
}
