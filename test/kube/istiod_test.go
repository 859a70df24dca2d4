package kube

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
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// istiod is one in-process istiod.
type istiod struct {
	name   string
	srv    *bootstrap.Server
	cfg    bootstrap.Config
	logs   *logtest.Buffer
	stop   func()
	exited chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// newIstiod wires an istiod in Kubernetes mode on free loopback ports with
// its own state directory, its mesh model from the API server. It installs
// the chart's CRDs, without which the model never syncs, and does not
// start istiod.
func newIstiod(t *testing.T, name, ns, kubeconfig string) *istiod {
	t.Helper()
	return newIstiodIn(t, testenv.Get(t), name, ns, kubeconfig)
}

// newIstiodIn is newIstiod on env's API server; opts change its
// configuration.
func newIstiodIn(t *testing.T, env *testenv.Env, name, ns, kubeconfig string, opts ...func(*bootstrap.Config)) *istiod {
	t.Helper()
	installIstioCRDsIn(t, env)
	cfg := bootstrap.DefaultConfig()
	cfg.Kubeconfig = kubeconfig
	cfg.Namespace = ns
	cfg.PodName = name
	cfg.StateDir = filepath.Join(t.TempDir(), "state")
	cfg.CACertsDir = filepath.Join(t.TempDir(), "cacerts") // empty: self-signed CA in istio-ca-secret
	cfg.SecureGRPCAddr = freeAddr(t)
	cfg.HTTPAddr = freeAddr(t)
	cfg.HTTPSAddr = freeAddr(t)
	cfg.MonitoringAddr = freeAddr(t)
	cfg.GracePeriod = time.Second
	for _, o := range opts {
		o(&cfg)
	}
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := bootstrap.New(cfg, log.With("istiod", name))
	if err != nil {
		t.Fatalf("%s: bootstrap.New: %v", name, err)
	}
	return &istiod{name: name, srv: srv, cfg: cfg, logs: logs}
}

// run starts p; the returned function (also a cleanup) stops it.
func (p *istiod) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p.exited = make(chan struct{})
	var runErr error
	go func() { defer close(p.exited); runErr = p.srv.Run(ctx) }()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-p.exited:
				if runErr != nil {
					t.Errorf("%s: Run: %v", p.name, runErr)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("%s: Run did not return 20s after cancel", p.name)
			}
		})
	}
	t.Cleanup(p.stop)
}

func (p *istiod) ready() bool {
	resp, err := http.Get("http://" + p.cfg.HTTPAddr + "/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// sign asks p's CSR API for a certificate for ns/sa, authenticated by a
// TokenRequest token, over TLS verified with roots as a sidecar verifies
// istiod with istio-ca-root-cert.
func (p *istiod) sign(t *testing.T, roots *x509.CertPool, ns, sa, token string) []string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return p.signKey(t, roots, ns, sa, token, key)
}

// signKey is sign for the given key.
func (p *istiod) signKey(t *testing.T, roots *x509.CertPool, ns, sa, token string, key *ecdsa.PrivateKey) []string {
	t.Helper()
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "istiod." + p.cfg.Namespace + ".svc", MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(p.cfg.SecureGRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id, _ := url.Parse(fmt.Sprintf("spiffe://cluster.local/ns/%s/sa/%s", ns, sa))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id}}, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	resp, err := pb.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx, &pb.IstioCertificateRequest{
		Csr: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
	})
	if err != nil {
		t.Fatalf("%s: CreateCertificate: %v", p.name, err)
	}
	if len(resp.CertChain) < 2 {
		t.Fatalf("%s: chain of %d elements", p.name, len(resp.CertChain))
	}
	return resp.CertChain
}

func TestTwoIstiodsStartingTogetherShareOneCA(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	kubeconfig := istiodKubeconfig(t, env, ns)
	grantIstiodRBAC(t, env, ns)
	a, b := newIstiod(t, "istiod-a", ns, kubeconfig), newIstiod(t, "istiod-b", ns, kubeconfig)
	started := time.Now()
	a.run(t)
	b.run(t)
	waitFor(t, "both istiods ready", 60*time.Second, func() bool { return a.ready() && b.ready() })
	t.Logf("both istiods ready %v after start", time.Since(started).Round(time.Millisecond))

	client := env.Client(t)
	secrets, err := client.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var caSecrets int
	for _, s := range secrets.Items {
		if s.Name == secretstore.SecretName {
			caSecrets++
		}
	}
	if caSecrets != 1 {
		t.Fatalf("%d %s secrets in %s; want exactly 1", caSecrets, secretstore.SecretName, ns)
	}

	// A sidecar trusts istiod by the ConfigMap in its namespace.
	app := env.Namespace(t)
	var rootPEM string
	waitFor(t, "istio-ca-root-cert in the app namespace", 10*time.Second, func() bool {
		cm, err := client.CoreV1().ConfigMaps(app).Get(context.Background(), rootcert.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		rootPEM = cm.Data[rootcert.DataKey]
		return rootPEM != ""
	})
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(rootPEM)) {
		t.Fatal("istio-ca-root-cert holds no certificate")
	}

	token := env.ServiceAccountToken(t, app, "app", []string{"istio-ca"}, nil)
	chainA := a.sign(t, roots, app, "app", token)
	chainB := b.sign(t, roots, app, "app", token)
	verifyWith(t, "a's certificate with b's bundle", chainA, chainB)
	verifyWith(t, "b's certificate with a's bundle", chainB, chainA)
}

func TestIstiodWithoutAccessStaysUnreadyAndRecovers(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	p := newIstiod(t, "istiod-a", ns, istiodKubeconfig(t, env, ns))
	p.run(t)
	// Every request is forbidden until the RBAC exists: istiod retries,
	// reports unready, and does not exit.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			t.Fatal("istiod exited while the API server refused it")
		default:
		}
		if p.ready() {
			t.Fatal("istiod is ready without access to istio-ca-secret")
		}
		time.Sleep(100 * time.Millisecond)
	}
	granted := time.Now()
	grantIstiodRBAC(t, env, ns)
	waitFor(t, "istiod ready once granted access", 90*time.Second, p.ready)
	t.Logf("ready %v after its RBAC was granted", time.Since(granted).Round(time.Millisecond))
}

// verifyWith verifies the leaf of chain against the roots that end other.
func verifyWith(t *testing.T, what string, chain, other []string) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(other[len(other)-1])) {
		t.Fatalf("%s: no roots", what)
	}
	block, _ := pem.Decode([]byte(chain[0]))
	if block == nil {
		t.Fatalf("%s: leaf is not PEM", what)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	inter := x509.NewCertPool()
	for _, p := range chain[1 : len(chain)-1] {
		inter.AppendCertsFromPEM([]byte(p))
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
