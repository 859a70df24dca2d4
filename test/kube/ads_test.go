package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// Resource types an ADS client asks istiod for.
const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeSecret   = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
)

// installIstioCRDsIn installs the chart's CRDs, which istiod's mesh model
// watches, on env's API server.
func installIstioCRDsIn(t *testing.T, env *testenv.Env) {
	t.Helper()
	paths, err := filepath.Glob("../../charts/istiod/crds/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("chart CRDs: %v (%d files)", err, len(paths))
	}
	env.InstallCRDs(t, paths...)
}

// testWriter writes each log record to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// checkNeverRefused fails if the API server refused istiod anything it
// logged, so the RBAC it was granted covers what it did.
func (p *istiod) checkNeverRefused(t *testing.T) {
	t.Helper()
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("%s: the API server refused istiod: %s", p.name, line)
		}
	}
}

// roots are the roots of p's own CA, from istio-ca-secret in its namespace.
// Not from istio-ca-root-cert: the istiods of tests running in parallel
// each publish their own root into every namespace of the shared API
// server, so that ConfigMap may hold another test's root.
func (p *istiod) roots(t *testing.T, env *testenv.Env) *x509.CertPool {
	t.Helper()
	secret, err := env.Client(t).CoreV1().Secrets(p.cfg.Namespace).Get(context.Background(), secretstore.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", secretstore.SecretName, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data[ca.FileRootCert]) {
		t.Fatalf("%s holds no %s", secretstore.SecretName, ca.FileRootCert)
	}
	return roots
}

// workloadCert is the client certificate of ns/sa from p's CSR API, got
// with a TokenRequest token as istio-agent gets it.
func (p *istiod) workloadCert(t *testing.T, env *testenv.Env, roots *x509.CertPool, ns, sa string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	token := env.ServiceAccountToken(t, ns, sa, []string{"istio-ca"}, nil)
	cert := tls.Certificate{PrivateKey: key}
	for _, c := range p.signKey(t, roots, ns, sa, token, key) {
		block, _ := pem.Decode([]byte(c))
		if block == nil {
			t.Fatal("certificate chain element is not PEM")
		}
		cert.Certificate = append(cert.Certificate, block.Bytes)
	}
	return cert
}

// adsClient is one proxy's ADS stream to istiod, over TLS with a workload
// certificate. It ACKs every response.
type adsClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *core.Node
	names  map[string][]string // subscribed names by type
	sent   bool                // the node went with the first request
	resps  chan *discovery.DiscoveryResponse
	errc   chan error
}

// dialADS opens an ADS stream to p as ns/sa, authenticated by cert.
func (p *istiod) dialADS(t *testing.T, roots *x509.CertPool, cert tls.Certificate, ns, sa string) *adsClient {
	t.Helper()
	tlsCfg := &tls.Config{
		RootCAs: roots, ServerName: "istiod." + p.cfg.Namespace + ".svc",
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	}
	conn, err := grpc.NewClient(p.cfg.SecureGRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa, "GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	c := &adsClient{
		t: t, stream: stream, names: map[string][]string{},
		node:  &core.Node{Id: "sidecar~10.0.0.1~" + sa + "-1." + ns + "~" + ns + ".svc.cluster.local", Metadata: md},
		resps: make(chan *discovery.DiscoveryResponse, 16),
		errc:  make(chan error, 1),
	}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				c.errc <- err
				return
			}
			c.resps <- r
		}
	}()
	return c
}

// subscribe asks for names of typeURL.
func (c *adsClient) subscribe(typeURL string, names ...string) {
	c.t.Helper()
	c.names[typeURL] = names
	c.send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
}

func (c *adsClient) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	if !c.sent {
		req.Node, c.sent = c.node, true
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", req.TypeUrl, err)
	}
}

// await ACKs responses until one of typeURL satisfies ok, and returns its
// resources decoded as new(M).
func await[M proto.Message](c *adsClient, what, typeURL string, ok func([]M) bool) []M {
	c.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-c.resps:
			c.send(&discovery.DiscoveryRequest{
				TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: c.names[r.TypeUrl],
			})
			if r.TypeUrl != typeURL {
				continue
			}
			var got []M
			for _, a := range r.Resources {
				m := newMessage[M]()
				if err := a.UnmarshalTo(m); err != nil {
					c.t.Fatalf("%s: decode %s: %v", what, a.TypeUrl, err)
				}
				got = append(got, m)
			}
			if ok(got) {
				return got
			}
			c.t.Logf("%s: not yet, got %d resources of version %s", what, len(got), r.VersionInfo)
		case err := <-c.errc:
			c.t.Fatalf("%s: stream ended: %v", what, err)
		case <-timeout:
			c.t.Fatalf("%s: no matching response in 30s", what)
		}
	}
}

func newMessage[M proto.Message]() M {
	var zero M
	return zero.ProtoReflect().Type().New().Interface().(M)
}
