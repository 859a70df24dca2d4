package xds

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	networkingv1 "istio.io/api/networking/v1"
)

var testTD = spiffeid.RequireTrustDomainFromString("cluster.local")

// headerAuth authenticates the caller as the SPIFFE ID in header "x-id":
// a stand-in for the client-certificate authenticator in unit tests.
type headerAuth struct{}

func (headerAuth) Kind() string { return "test" }
func (headerAuth) Authenticate(ctx context.Context) (*authn.Caller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("x-id")
	if len(v) != 1 {
		return nil, authn.ErrNoCredentials
	}
	id, err := spiffeid.FromString(v[0])
	if err != nil {
		return nil, err
	}
	return &authn.Caller{Identities: []spiffeid.ID{id}, Authenticator: "test"}, nil
}

type harness struct {
	t     *testing.T
	srv   *Server
	store *model.Store
	reg   *prometheus.Registry
	conn  *grpc.ClientConn
	// stopRun cancels the server's Run and waits for it to return, as
	// istiod's shutdown does.
	stopRun func()
}

func newHarness(t *testing.T, snap *model.Snapshot, mod func(*Config)) *harness {
	t.Helper()
	return newHarnessOn(t, snap, mod, (*Server).Register)
}

// newHarnessOn is newHarness with the ADS service registered by register.
func newHarnessOn(t *testing.T, snap *model.Snapshot, mod func(*Config), register func(*Server, grpc.ServiceRegistrar)) *harness {
	t.Helper()
	return startHarness(t, snap, mod, register, insecure.NewCredentials(), insecure.NewCredentials())
}

// newTLSHarness is newHarness with the streams over TLS.
func newTLSHarness(t *testing.T, snap *model.Snapshot, mod func(*Config)) *harness {
	t.Helper()
	root := catest.NewRoot(t)
	serving := catest.NewIntermediate(t, root, catest.WithoutCA())
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// The server's certificate is not under test here.
	client := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec
	return startHarness(t, snap, mod, (*Server).Register, credentials.NewServerTLSFromCert(&cert), client)
}

func startHarness(t *testing.T, snap *model.Snapshot, mod func(*Config), register func(*Server, grpc.ServiceRegistrar),
	serverCreds, clientCreds credentials.TransportCredentials,
) *harness {
	t.Helper()
	store := model.NewStore()
	if snap != nil {
		store.Publish(snap)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{
		Model: store, Authenticator: headerAuth{}, TrustDomain: testTD, Registerer: reg,
		Logger: catest.Logger(t), DebounceQuiet: 10 * time.Millisecond, DebounceMax: 100 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(grpc.ForceServerCodecV2(Codec()), grpc.Creds(serverCreds))
	register(srv, gs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(clientCreds))
	if err != nil {
		t.Fatal(err)
	}
	stopRun := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(func() {
		conn.Close()
		stopRun()
		gs.Stop()
	})
	return &harness{t: t, srv: srv, store: store, reg: reg, conn: conn, stopRun: stopRun}
}

// stream opens an ADS stream as identity id.
func (h *harness) stream(id string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	h.t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-id", id)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func testNode(ns, sa string, labels map[string]any) *core.Node {
	md := map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa, "GENERATOR": "grpc"}
	if labels != nil {
		md["LABELS"] = labels
	}
	s, err := structpb.NewStruct(md)
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: "sidecar~10.0.0.1~app-1." + ns + "~" + ns + ".svc.cluster.local", Metadata: s}
}

// recv waits for one response, failing after a while.
func recv(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient) *discovery.DiscoveryResponse {
	t.Helper()
	type result struct {
		r   *discovery.DiscoveryResponse
		err error
	}
	ch := make(chan result, 1)
	go func() { r, err := st.Recv(); ch <- result{r, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("recv: %v", r.err)
		}
		return r.r
	case <-time.After(10 * time.Second):
		t.Fatal("no response")
	}
	return nil
}

// noResponse checks that nothing arrives while the stream serves a probe
// request of another type: responses are handled in order per stream, so
// the probe's answer coming first shows no other response was queued.
func noResponse(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, probeType string) *discovery.DiscoveryResponse {
	t.Helper()
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: probeType, ResourceNames: []string{"probe.none.svc.cluster.local:1"}}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if r.GetTypeUrl() != probeType {
		t.Fatalf("got an unexpected %s response (version %s)", r.GetTypeUrl(), r.GetVersionInfo())
	}
	return r
}

const baseManifests = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 8080, targetPort: 9000}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: app}
spec:
  address: 10.0.0.2
  labels: {app: echo, security.istio.io/tlsMode: istio}
  serviceAccount: echo
  locality: us-east1/us-east1-b
  ports: {grpc: 9000}
`

func workloadEntry(addr string) *networkingv1.WorkloadEntry {
	return &networkingv1.WorkloadEntry{Address: addr, Labels: map[string]string{"app": "echo"}, ServiceAccount: "echo"}
}

// waitFor polls cond until it holds or 5s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
