package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
)

// goawayTap is a client connection that decodes the HTTP/2 frames the
// server sends, to see whether a GOAWAY came before the connection ended.
type goawayTap struct {
	net.Conn
	w      *io.PipeWriter
	goaway atomic.Bool
}

// dialTapped dials addr over TLS (as an agent does, with the client
// certificate of c) and taps what the server sends.
func dialTapped(ctx context.Context, addr string, cfg *tls.Config) (*goawayTap, error) {
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	r, w := io.Pipe()
	tap := &goawayTap{Conn: conn, w: w}
	go func() {
		fr := http2.NewFramer(nil, r)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				_, _ = io.Copy(io.Discard, r) // keep the connection's reads flowing
				return
			}
			if _, ok := f.(*http2.GoAwayFrame); ok {
				tap.goaway.Store(true)
			}
		}
	}()
	return tap, nil
}

func (c *goawayTap) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		_, _ = c.w.Write(b[:n])
	}
	if err != nil {
		c.w.CloseWithError(err)
	}
	return n, err
}

// retryable are the codes after which an agent or proxy tries again.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.OK, codes.Unavailable:
		return true
	}
	return false
}

// TestSIGTERMDuringPushesAndCSRBursts sends istiod SIGTERM while proxies
// hold ADS streams and agents send CSRs: every CSR is answered with a
// certificate or a retryable code, every ADS connection gets a GOAWAY and
// its stream ends Unavailable, istiod exits 0 well within its grace period,
// and its state directory is whole: a new istiod on it signs with the
// same root.
func TestSIGTERMDuringPushesAndCSRBursts(t *testing.T) {
	t.Parallel()
	configDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "mesh.yaml"), []byte(plaintextModel), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	p := startIstiod(t, state, "--configDir", configDir)
	demo := mint(t, state, "app", "client")
	rootPEM := mustRead(t, demo.path("root-cert.pem"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	cert, err := tls.LoadX509KeyPair(demo.path("cert-chain.pem"), demo.path("key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "istiod.istio-system.svc", Certificates: []tls.Certificate{cert},
		MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}

	// Proxies: one connection and one ADS stream each, configured.
	const proxies = 8
	meta, err := structpb.NewStruct(map[string]any{"NAMESPACE": "app", "SERVICE_ACCOUNT": "client", "GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	type proxy struct {
		tap  *goawayTap
		done chan error // the stream's end
	}
	var ps []*proxy
	for i := range proxies {
		px := &proxy{done: make(chan error, 1)}
		conn, err := grpc.NewClient("passthrough:///"+p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				tap, err := dialTapped(ctx, addr, tlsCfg)
				if err == nil && px.tap == nil {
					px.tap = tap
				}
				return tap, err
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		sctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
		if err != nil {
			t.Fatal(err)
		}
		node := &core.Node{Id: "sidecar~127.0.0.1~client-" + string(rune('a'+i)) + ".app~app.svc.cluster.local", Metadata: meta}
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType, ResourceNames: []string{"outbound|8080||echo.app.svc.cluster.local"}}); err != nil {
			t.Fatal(err)
		}
		if r, err := st.Recv(); err != nil || len(r.GetResources()) != 1 {
			t.Fatalf("proxy %d: first response: %v, %v\n%s", i, r, err, p.log.String())
		}
		go func() {
			for {
				if _, err := st.Recv(); err != nil {
					px.done <- err
					return
				}
			}
		}()
		ps = append(ps, px)
	}

	// Agents: CSRs back to back on a few connections, until the end.
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		outcomes  = map[codes.Code]int{}
		bad       []error
		stopBurst atomic.Bool
	)
	csr := newCSR(t, "spiffe://cluster.local/ns/app/sa/client")
	for range 4 {
		client := p.dial(demo, true)
		wg.Go(func() {
			for !stopBurst.Load() {
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := client.CreateCertificate(rctx, &pb.IstioCertificateRequest{Csr: csr})
				cancel()
				mu.Lock()
				outcomes[status.Code(err)]++
				if !retryable(err) {
					bad = append(bad, err)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // the burst is under way

	sent := time.Now()
	p.signal(syscall.SIGTERM)
	code := p.exitCode(20 * time.Second)
	exited := time.Since(sent)
	time.Sleep(200 * time.Millisecond) // CSRs against the closed port
	stopBurst.Store(true)
	wg.Wait()
	t.Logf("SIGTERM → exit %d after %v; CSR outcomes: %v", code, exited.Round(time.Millisecond), outcomes)
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0\n%s", code, p.log.String())
	}
	if outcomes[codes.OK] == 0 {
		t.Error("no CSR was signed: the burst did not run")
	}
	for _, err := range bad {
		t.Errorf("CSR answered with a code an agent does not retry: %v", err)
	}

	for i, px := range ps {
		select {
		case err := <-px.done:
			if status.Code(err) != codes.Unavailable {
				t.Errorf("proxy %d: stream ended with %v, want Unavailable", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("proxy %d: stream still open after istiod exited", i)
		}
		if px.tap == nil || !px.tap.goaway.Load() {
			t.Errorf("proxy %d: no GOAWAY before the connection ended", i)
		}
	}

	// Nothing half-written: no temporary files, and the next istiod signs
	// with the same root.
	if err := filepath.Walk(state, func(path string, _ os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(filepath.Base(path), ".tmp") {
			return errors.New("left behind: " + path)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	next := startIstiod(t, state, "--configDir", configDir)
	resp, err := next.dial(demo, true).CreateCertificate(ctx(t), &pb.IstioCertificateRequest{Csr: csr})
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if got := resp.CertChain[len(resp.CertChain)-1]; strings.TrimSpace(got) != strings.TrimSpace(string(rootPEM)) {
		t.Error("after restart istiod signs with another root")
	}
}
