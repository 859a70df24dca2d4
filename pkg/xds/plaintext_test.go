package xds

import (
	"context"
	"errors"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
)

// refuseAll fails every authentication and counts the attempts.
type refuseAll struct{ calls *int }

func (refuseAll) Kind() string { return "refuse" }
func (r refuseAll) Authenticate(context.Context) (*authn.Caller, error) {
	*r.calls++
	return nil, errors.New("no credentials")
}

func newPlaintextHarness(t *testing.T, calls *int) *harness {
	t.Helper()
	secrets, err := sds.New(sds.Config{Bundles: newBundles(catest.NewRoot(t)), Logger: catest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessOn(t, modeltest.Load(t, baseManifests), func(c *Config) {
		c.Authenticator = refuseAll{calls}
		c.Secrets = secrets
	}, (*Server).RegisterPlaintext)
}

func TestPlaintextServesConfigWithoutAuthentication(t *testing.T) {
	var calls int
	h := newPlaintextHarness(t, &calls)
	st := h.stream("")
	req := &discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: typeCluster, ResourceNames: []string{"outbound|8080||echo.app.svc.cluster.local"}}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, st); len(r.GetResources()) != 1 {
		t.Fatalf("got %d clusters, want 1", len(r.GetResources()))
	}
	if calls != 0 {
		t.Errorf("the authenticator was asked %d times on the plaintext port", calls)
	}
}

func TestPlaintextNeverServesSecrets(t *testing.T) {
	var calls int
	h := newPlaintextHarness(t, &calls)
	st := h.stream(ingressID) // credentials are ignored on this port
	req := &discovery.DiscoveryRequest{Node: testNode("gw", "ingress", nil), TypeUrl: typeSecret, ResourceNames: []string{"ROOTCA", "kubernetes://cert"}}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	if got := secretsOf(t, recv(t, st)); len(got) != 0 {
		t.Fatalf("the plaintext port served %v", keys(got))
	}
}

func TestPlaintextRefusesBadNodes(t *testing.T) {
	for name, md := range map[string]map[string]any{
		"a wrong-typed field":      {"NAMESPACE": "app", "SERVICE_ACCOUNT": "client", "INSTANCE_IPS": 1},
		"no namespace":             {"SERVICE_ACCOUNT": "client"},
		"a namespace with a slash": {"NAMESPACE": "a/b", "SERVICE_ACCOUNT": "client"},
	} {
		t.Run(name, func(t *testing.T) {
			var calls int
			h := newPlaintextHarness(t, &calls)
			st := h.stream("")
			meta, err := structpb.NewStruct(md)
			if err != nil {
				t.Fatal(err)
			}
			node := testNode("app", "client", nil)
			node.Metadata = meta
			if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typeListener}); err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
		})
	}
}

func TestPlaintextDeltaServesConfigButNoSecrets(t *testing.T) {
	var calls int
	h := newPlaintextHarness(t, &calls)
	st := h.deltaStream("")
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: typeCluster, ResourceNamesSubscribe: []string{"outbound|8080||echo.app.svc.cluster.local"}}); err != nil {
		t.Fatal(err)
	}
	if r := recvDelta(t, st); len(r.GetResources()) != 1 {
		t.Fatalf("got %d clusters, want 1", len(r.GetResources()))
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeSecret, ResourceNamesSubscribe: []string{"ROOTCA"}}); err != nil {
		t.Fatal(err)
	}
	// Nothing is sent for the secret; a later subscription is answered.
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeListener, ResourceNamesSubscribe: []string{"echo.app.svc.cluster.local:8080"}}); err != nil {
		t.Fatal(err)
	}
	if r := recvDelta(t, st); r.GetTypeUrl() != typeListener {
		t.Fatalf("got a %s response with %d resources, want the listener", r.GetTypeUrl(), len(r.GetResources()))
	}
	if calls != 0 {
		t.Errorf("the authenticator was asked %d times on the plaintext port", calls)
	}
}
