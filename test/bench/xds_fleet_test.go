package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// The service every simulated proxy subscribes to, and the identity its
// client certificate (minted by `istiod mint-cert`) carries.
const (
	fleetNS       = "bench"
	fleetSA       = "load"
	echoHost      = "echo." + fleetNS + ".svc.cluster.local"
	echoListener  = echoHost + ":8080"
	echoCluster   = "outbound|8080||" + echoHost
	typeListener  = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeCluster   = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint  = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	backoffBase   = 100 * time.Millisecond
	backoffMax    = 5 * time.Second
	fleetTypes    = 3
	modelFileName = "mesh.yaml"
)

var subscriptions = []struct{ typeURL, name string }{
	{typeListener, echoListener}, {typeCluster, echoCluster}, {typeEndpoint, echoCluster},
}

// echoModel is the --configDir manifest: one Service and one endpoint at addr.
func echoModel(addr string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: echo, namespace: %[1]s}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 8080, targetPort: 9000}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: %[1]s}
spec:
  address: %[2]s
  labels: {app: echo, security.istio.io/tlsMode: istio}
  serviceAccount: echo
  ports: {grpc: 9000}
`, fleetNS, addr)
}

// writeModel replaces the model file with the echo model at addr.
func writeModel(b *testing.B, dir, addr string) { writeModelText(b, dir, echoModel(addr)) }

// writeModelText replaces the model file atomically: the watcher skips
// names starting with ".", so it never reads a half-written file.
func writeModelText(b *testing.B, dir, text string) {
	b.Helper()
	tmp := filepath.Join(dir, ".tmp-"+modelFileName)
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, modelFileName)); err != nil {
		b.Fatal(err)
	}
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit. istiod,
// started afterwards with os/exec, inherits it (an explicit Setrlimit is
// what children inherit), and needs one descriptor per proxy connection.
func raiseFileLimit(b *testing.B, need uint64) {
	b.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur < need {
		b.Skipf("RLIMIT_NOFILE hard limit %d is below the %d descriptors needed", lim.Max, need)
	}
}

// fleet is a set of simulated proxies, each on its own TCP+TLS connection
// with one ADS stream: proxyless gRPC clients, or Envoy sidecars (envoy,
// in xds_envoy_test.go).
type fleet struct {
	addr  string
	tls   *tls.Config
	envoy *envoyFleet // nil for proxyless proxies

	ready    atomic.Int64 // sessions that have ACKed all subscriptions
	retries  retries
	stopping atomic.Bool // connection errors are the fleet's own

	// After a model change: the EDS version before it, when the change was
	// written, and each proxy's time to ACK a different version.
	baseline  atomic.Pointer[string]
	changedAt atomic.Int64
	converged atomic.Int64
	lat       []time.Duration

	wg      sync.WaitGroup
	proxies []*simProxy
}

type simProxy struct {
	i         int
	conn      *grpc.ClientConn
	cancel    context.CancelFunc
	converged atomic.Bool
	lastEDS   atomic.Pointer[string]
}

func newFleet(b *testing.B, srv *server, n int) *fleet {
	b.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(srv.creds, "cert-chain.pem"), filepath.Join(srv.creds, "key.pem"))
	if err != nil {
		b.Fatal(err)
	}
	rootPEM, err := os.ReadFile(filepath.Join(srv.creds, "root-cert.pem"))
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	f := &fleet{addr: srv.addr, lat: make([]time.Duration, n), tls: &tls.Config{
		RootCAs: roots, ServerName: "istiod.istio-system.svc", Certificates: []tls.Certificate{cert},
	}}
	b.Cleanup(f.stop)
	return f
}

// start connects n proxies at once. Like a real xDS client, each one's
// channel reconnects with gRPC's connection backoff, and its ADS stream
// waits for the channel and is retried with jittered backoff on any error
// until ctx ends.
func (f *fleet) start(b *testing.B, ctx context.Context, n int) {
	b.Helper()
	f.stopping.Store(false)
	f.proxies = make([]*simProxy, n)
	for i := range n {
		conn, err := grpc.NewClient(f.addr,
			grpc.WithTransportCredentials(countingCreds{credentials.NewTLS(f.tls), f}),
			grpc.WithContextDialer(f.dial), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
			grpc.WithReadBufferSize(4<<10), grpc.WithWriteBufferSize(4<<10), grpc.WithSharedWriteBuffer(true))
		if err != nil {
			b.Fatal(err)
		}
		pctx, cancel := context.WithCancel(ctx)
		p := &simProxy{i: i, conn: conn, cancel: cancel}
		f.proxies[i] = p
		f.wg.Add(1)
		go func() { defer f.wg.Done(); f.run(pctx, p) }()
	}
}

// stop closes every connection at once and waits for the proxies to end.
func (f *fleet) stop() {
	f.stopping.Store(true)
	for _, p := range f.proxies {
		p.cancel()
		p.conn.Close()
	}
	f.wg.Wait()
	f.proxies = nil
}

// run keeps p's ADS session open until ctx ends, retrying with
// exponential backoff and full jitter.
func (f *fleet) run(ctx context.Context, p *simProxy) {
	session := f.session
	if f.envoy != nil {
		session = f.envoySession
	}
	for attempt := 0; ; attempt++ {
		err := session(ctx, p)
		if ctx.Err() != nil {
			return
		}
		f.retries.stream(err)
		d := min(backoffMax, backoffBase<<min(attempt, 10))
		select {
		case <-ctx.Done():
			return
		case <-time.After(rand.N(d) + time.Millisecond):
		}
	}
}

// session is one ADS stream: subscribe to the listener, cluster and
// endpoints of echo, ACK every response, record convergence.
func (f *fleet) session(ctx context.Context, p *simProxy) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(p.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	for i, s := range subscriptions {
		req := &discovery.DiscoveryRequest{TypeUrl: s.typeURL, ResourceNames: []string{s.name}}
		if i == 0 {
			req.Node = proxyNode(p.i)
		}
		if err := st.Send(req); err != nil {
			return streamError(st, err)
		}
	}
	acked := map[string]bool{}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		name := echoCluster
		if resp.GetTypeUrl() == typeListener {
			name = echoListener
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: []string{name},
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			return streamError(st, err)
		}
		if !acked[resp.GetTypeUrl()] {
			acked[resp.GetTypeUrl()] = true
			if len(acked) == fleetTypes {
				f.ready.Add(1)
			}
		}
		if resp.GetTypeUrl() == typeEndpoint {
			f.observeEDS(p, resp.GetVersionInfo())
		}
	}
}

// observeEDS records the version of the endpoints p ACKed, and p's
// convergence when it differs from the one before the change.
func (f *fleet) observeEDS(p *simProxy, version string) {
	p.lastEDS.Store(&version)
	if base := f.baseline.Load(); base != nil && *base != version && p.converged.CompareAndSwap(false, true) {
		f.lat[p.i] = time.Since(time.Unix(0, f.changedAt.Load()))
		f.converged.Add(1)
	}
}

// streamError is the status that ended the stream: Send reports only
// io.EOF, and Recv returns the server's status.
func streamError(st grpc.ClientStream, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if rerr := st.RecvMsg(new(emptypb.Empty)); rerr != nil { // any response decodes as Empty
			return rerr
		}
	}
}

// proxyNode is what pilot-agent sends for a proxyless gRPC workload.
func proxyNode(i int) *core.Node {
	ip := fmt.Sprintf("10.%d.%d.%d", 10+i>>16, i>>8&0xff, i&0xff)
	md, err := structpb.NewStruct(map[string]any{
		"GENERATOR": "grpc", "NAMESPACE": fleetNS, "SERVICE_ACCOUNT": fleetSA,
		"INSTANCE_IPS": ip, "LABELS": map[string]any{"app": "client"},
	})
	if err != nil {
		panic(err)
	}
	return &core.Node{
		Id:       fmt.Sprintf("sidecar~%s~client-%d.%s~%s.svc.cluster.local", ip, i, fleetNS, fleetNS),
		Metadata: md,
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(b *testing.B, what string, timeout time.Duration, cond func() bool, progress func() string) time.Duration {
	b.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			b.Fatalf("%s: not done after %s (%s)", what, timeout, progress())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func (f *fleet) waitReady(b *testing.B, n int, timeout time.Duration) time.Duration {
	return waitFor(b, "connect", timeout, func() bool { return f.ready.Load() >= int64(n) }, f.progress)
}

func (f *fleet) progress() string {
	return fmt.Sprintf("ready %d, converged %d; %s", f.ready.Load(), f.converged.Load(), &f.retries)
}
