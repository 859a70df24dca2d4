package xds_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds"
)

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

// appBinary is the proxyless workload, built once by TestMain.
var appBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bulwark-xds-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	appBinary = filepath.Join(dir, "app")
	build := exec.Command("go", "build", "-o", appBinary, "./app")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build test app:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// mesh is istiod's security and xDS side on loopback: a CA, the ADS server
// over TLS authenticating client certificates, and a model directory.
type mesh struct {
	t        *testing.T
	ca       *ca.CA
	modelDir string
	xdsAddr  string
	srv      *xds.Server
	files    map[string]string
}

func newMesh(t *testing.T) *mesh {
	t.Helper()
	log := catest.Logger(t)
	authority, err := ca.New(ca.Config{TrustDomain: td, Store: ca.NewDirStore(t.TempDir()), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := authority.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := &mesh{t: t, ca: authority, modelDir: t.TempDir(), files: map[string]string{}}

	store := model.NewStore()
	source := model.NewFileSource(model.FileConfig{Dir: m.modelDir, Publisher: store, Debounce: 10 * time.Millisecond, Logger: log})
	roots := func() *x509.CertPool { return authority.Current().Pool() }
	m.srv, err = xds.New(xds.Config{
		Model:         store,
		Authenticator: authn.Chain{authn.NewClientCert(td, roots, nil)},
		TrustDomain:   td,
		Registerer:    prometheus.NewRegistry(),
		Logger:        log.With("component", "xds"),
		DebounceQuiet: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}

	serving := m.issue("", "", "localhost")
	cert, err := tls.X509KeyPair(serving.cert, serving.key)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    authority.Current().Pool(),
	})))
	m.srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.xdsAddr = lis.Addr().String()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = source.Run(ctx) })
	wg.Go(func() { _ = m.srv.Run(ctx) })
	wg.Go(func() { _ = gs.Serve(lis) })
	t.Cleanup(func() {
		cancel()
		gs.Stop()
		wg.Wait()
	})
	return m
}

type issued struct{ cert, key, roots []byte }

// issue signs a certificate for service account ns/sa, or for dnsName.
func (m *mesh) issue(ns, sa string, dnsNames ...string) issued {
	m.t.Helper()
	key := catest.NewKey(m.t)
	req := ca.SignRequest{PublicKey: key.Public(), DNSNames: dnsNames}
	if sa != "" {
		req.Identities = []spiffeid.ID{spiffeid.RequireFromSegments(td, "ns", ns, "sa", sa)}
	}
	iss, err := m.ca.Sign(req)
	if err != nil {
		m.t.Fatal(err)
	}
	chain := strings.Join(iss.Chain[:len(iss.Chain)-1], "")
	return issued{cert: []byte(chain), key: catest.KeyPEM(m.t, key), roots: m.ca.Current().PEM}
}

// setModel writes one model file (empty content removes it).
func (m *mesh) setModel(name, content string) {
	m.t.Helper()
	path := filepath.Join(m.modelDir, name+".yaml")
	if content == "" {
		if err := os.Remove(path); err != nil {
			m.t.Fatal(err)
		}
		return
	}
	catest.WriteFiles(m.t, m.modelDir, map[string][]byte{name + ".yaml": []byte(content)})
}

// workload is a proxyless gRPC process.
type workload struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// start runs the app as service account ns/sa with labels, and args.
func (m *mesh) start(name, ns, sa string, labels map[string]string, args ...string) *workload {
	m.t.Helper()
	dir := m.t.TempDir()
	id := m.issue(ns, sa)
	write := func(n string, b []byte) string {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			m.t.Fatal(err)
		}
		return p
	}
	certFile, keyFile, rootFile := write("cert-chain.pem", id.cert), write("key.pem", id.key), write("root-cert.pem", id.roots)
	_, port, _ := net.SplitHostPort(m.xdsAddr)
	bootstrap := map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri": "localhost:" + port,
			"channel_creds": []any{map[string]any{"type": "tls", "config": map[string]any{
				"ca_certificate_file": rootFile, "certificate_file": certFile, "private_key_file": keyFile,
			}}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{
			"id":       "sidecar~127.0.0.1~" + name + "." + ns + "~" + ns + ".svc.cluster.local",
			"metadata": map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa, "GENERATOR": "grpc", "LABELS": labels},
		},
		"certificate_providers": map[string]any{"default": map[string]any{
			"plugin_name": "file_watcher",
			"config": map[string]any{
				"certificate_file": certFile, "private_key_file": keyFile, "ca_certificate_file": rootFile,
				"refresh_interval": "900s",
			},
		}},
		"server_listener_resource_name_template": "xds.istio.io/grpc/lds/inbound/%s",
	}
	js, err := json.Marshal(bootstrap)
	if err != nil {
		m.t.Fatal(err)
	}
	cmd := exec.Command(appBinary, args...)
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+write("bootstrap.json", js))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	cmd.Stderr = &testWriter{t: m.t, prefix: name + ": "}
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	w := &workload{t: m.t, cmd: cmd, stdin: stdin, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	m.t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return w
}

// waitLine waits for a line starting with prefix.
func (w *workload) waitLine(prefix string, timeout time.Duration) string {
	w.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("workload exited waiting for %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			w.t.Fatalf("no %q line within %s", prefix, timeout)
		}
	}
}

// call makes one RPC and returns "ok <server> <caller>" or "err <code> …".
func (w *workload) call(t *testing.T) string {
	t.Helper()
	if _, err := io.WriteString(w.stdin, "call\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case l, ok := <-w.lines:
		if !ok {
			t.Fatal("client exited")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("client did not answer")
	}
	return ""
}

// eventually calls until a result satisfies ok, and returns it with the
// time it took.
func (w *workload) eventually(t *testing.T, what string, timeout time.Duration, ok func(string) bool) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		if last = w.call(t); ok(last) {
			return last, time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last result %q", what, timeout, last)
	return "", 0
}

type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// acked returns the version of typeURL the proxy named node acknowledged.
func (m *mesh) acked(node, typeURL string) string {
	for _, p := range m.srv.Proxies() {
		if strings.Contains(p.NodeID, "~"+node+".") {
			return p.Acked[typeURL]
		}
	}
	return ""
}

// waitAckedChange waits until the proxy acknowledges another version than
// old.
func (m *mesh) waitAckedChange(t *testing.T, node, typeURL, old string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(10 * time.Millisecond) {
		if v := m.acked(node, typeURL); v != "" && v != old {
			return
		}
	}
	t.Fatalf("%s did not acknowledge a new %s", node, typeURL)
}
