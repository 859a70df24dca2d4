package kube

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// link is a TCP forwarder between istiod and the API server that a test
// can cut, as a network partition would: istiod then sees the API server
// go away while the test still reaches it directly.
type link struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

// newLink forwards a loopback port to target (host:port) until the test ends.
func newLink(t *testing.T, target string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go l.serve()
	t.Cleanup(func() { ln.Close(); l.Cut() })
	return l
}

// URL is the https URL istiod is given for the API server.
func (l *link) URL() string { return "https://" + l.ln.Addr().String() }

func (l *link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.forward(c)
	}
}

func (l *link) forward(c net.Conn) {
	if !l.track(c) {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil || !l.track(up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

// track records c unless the link is cut.
func (l *link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

// Cut closes every forwarded connection and refuses new ones.
func (l *link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		c.Close()
	}
	clear(l.conns)
}

// Restore forwards new connections again.
func (l *link) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
}

// kubeconfigVia rewrites the kubeconfig file at path to reach the API
// server at apiURL through via, and returns the new file's path. The
// serving certificate names 127.0.0.1, which the link also is.
func kubeconfigVia(t *testing.T, path, apiURL, via string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), apiURL) {
		t.Fatalf("%s does not name %s", path, apiURL)
	}
	out := filepath.Join(t.TempDir(), "kubeconfig-via-link")
	if err := os.WriteFile(out, []byte(strings.ReplaceAll(string(b), apiURL, via)), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// csr asks p's CSR API for a certificate of ns/sa, authenticated by the
// client certificate cert if given, else by token. It returns the gRPC
// error, nil when a chain came back.
func (p *istiod) csr(roots *x509.CertPool, ns, sa string, cert *tls.Certificate, token string) error {
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "istiod." + p.cfg.Namespace + ".svc", MinVersion: tls.VersionTLS12}
	if cert != nil {
		tlsCfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(p.cfg.SecureGRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	id, _ := url.Parse(fmt.Sprintf("spiffe://cluster.local/ns/%s/sa/%s", ns, sa))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id}}, key)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	resp, err := pb.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx, &pb.IstioCertificateRequest{
		Csr: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
	})
	if err != nil {
		return err
	}
	if len(resp.CertChain) < 2 {
		return fmt.Errorf("chain of %d elements", len(resp.CertChain))
	}
	return nil
}

// metric reads an unlabelled sample from p's /metrics; -1 when absent.
func (p *istiod) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.cfg.MonitoringAddr + "/metrics")
	if err != nil {
		t.Fatalf("%s: /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %s: %v", p.name, name, err)
			}
			return f
		}
	}
	return -1
}

// readyStatus is p's /ready answer: status code and body.
func (p *istiod) readyStatus() (int, string) {
	resp, err := http.Get("http://" + p.cfg.HTTPAddr + "/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, string(b)
}

// inject posts a Pod CREATE review to p's /inject and reports whether the
// answer allowed it with a patch adding istio-proxy.
func (p *istiod) inject(roots *x509.CertPool) error {
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "istiod." + p.cfg.Namespace + ".svc", MinVersion: tls.VersionTLS12,
	}}}
	defer client.CloseIdleConnections()
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
	  "uid":"outage-1","kind":{"group":"","version":"v1","kind":"Pod"},
	  "resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","namespace":"shop",
	  "object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop","labels":{"app":"web"}},
	    "spec":{"serviceAccountName":"web","containers":[{"name":"web","image":"nginx"}]}}}}`
	resp, err := client.Post("https://"+p.cfg.HTTPSAddr+"/inject", "application/json", strings.NewReader(review))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Response struct {
			Allowed bool   `json:"allowed"`
			Patch   []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	if !out.Response.Allowed || !strings.Contains(string(out.Response.Patch), `"name":"istio-proxy"`) {
		return fmt.Errorf("status %d, allowed %t, patch without istio-proxy", resp.StatusCode, out.Response.Allowed)
	}
	return nil
}

// countLines counts the lines of s holding every one of parts.
func countLines(s string, parts ...string) int {
	n := 0
	for _, line := range strings.Split(s, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// adsWithToken opens an ADS stream to p authenticated by a bearer token
// alone, as a proxy without a certificate yet does, sends its first
// request and returns the stream's first answer: an error, or nil for a
// response.
func (p *istiod) adsWithToken(roots *x509.CertPool, ns, sa, token string) error {
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "istiod." + p.cfg.Namespace + ".svc", MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(p.cfg.SecureGRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa, "GENERATOR": "grpc"})
	if err != nil {
		return err
	}
	if err := st.Send(&discovery.DiscoveryRequest{
		Node:    &core.Node{Id: "sidecar~10.0.0.9~" + sa + "-1." + ns + "~" + ns + ".svc.cluster.local", Metadata: md},
		TypeUrl: typeCluster,
	}); err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

// privateCluster starts an API server of the test's own with Istio's CRDs
// and a namespace for istiod with its RBAC, and returns them with the API
// server's host:port, for a link the test can cut.
func privateCluster(t *testing.T) (env *testenv.Env, ns, apiHost string) {
	t.Helper()
	env = testenv.StartPrivate(t)
	installIstioCRDsIn(t, env)
	ns = env.Namespace(t)
	grantIstiodRBAC(t, env, ns)
	u, err := url.Parse(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	return env, ns, u.Host
}
