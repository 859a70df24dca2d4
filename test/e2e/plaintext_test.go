package e2e

import (
	"os"
	"path/filepath"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
)

const plaintextModel = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 8080}]
`

// The plaintext port (--grpcAddr, Istio's 15010) serves configuration to
// proxies it cannot authenticate, and nothing else: no secrets, no CSR API.
func TestPlaintextPortServesConfigurationOnly(t *testing.T) {
	configDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "mesh.yaml"), []byte(plaintextModel), 0o600); err != nil {
		t.Fatal(err)
	}
	plainAddr := freePort(t)
	p := startIstiod(t, t.TempDir(), "--grpcAddr", plainAddr, "--configDir", configDir)
	conn, err := grpc.NewClient(plainAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	meta, err := structpb.NewStruct(map[string]any{"NAMESPACE": "app", "SERVICE_ACCOUNT": "client", "GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "sidecar~127.0.0.1~client-1.app~app.svc.cluster.local", Metadata: meta}
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	send := func(typeURL string, names ...string) *discovery.DiscoveryResponse {
		t.Helper()
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("%s: %v\n%s", typeURL, err, p.log.String())
		}
		return r
	}
	const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	cluster := "outbound|8080||echo.app.svc.cluster.local"
	// /ready waited for the model, so the first answer has the cluster.
	r := send(clusterType, cluster)
	if len(r.GetResources()) != 1 {
		t.Fatalf("got %d clusters, want 1", len(r.GetResources()))
	}
	const secretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	if r := send(secretType, "ROOTCA"); len(r.GetResources()) != 0 {
		t.Fatalf("the plaintext port served %d secrets", len(r.GetResources()))
	}

	_, err = pb.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx(t), &pb.IstioCertificateRequest{Csr: newCSR(t, "spiffe://cluster.local/ns/app/sa/client")})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("CreateCertificate on the plaintext port: %v, want Unimplemented", err)
	}
}
