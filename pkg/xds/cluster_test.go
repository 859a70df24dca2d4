package xds

import (
	"context"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// clusterAuth is headerAuth whose caller was authenticated by the cluster
// in header "x-cluster" (none: a client certificate, bound to istiod's own
// cluster).
type clusterAuth struct{}

func (clusterAuth) Kind() string { return "test" }
func (clusterAuth) Authenticate(ctx context.Context) (*authn.Caller, error) {
	caller, err := headerAuth{}.Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-cluster"); len(v) == 1 {
		caller.ClusterID = v[0]
	}
	return caller, nil
}

func TestProxyIsBoundToTheClusterThatAuthenticatedIt(t *testing.T) {
	const local = "cluster-a"
	tests := map[string]struct {
		authenticatedBy string // "" : a client certificate
		claimed         string // node metadata CLUSTER_ID
		plaintext       bool
		code            codes.Code
	}{
		"a local token and the local cluster in metadata is served": {
			authenticatedBy: local, claimed: local, code: codes.OK},
		"a local token and no cluster in metadata is served": {
			authenticatedBy: local, code: codes.OK},
		"a client certificate and the local cluster is served": {
			claimed: local, code: codes.OK},
		// Istio serves this proxy cluster-a's pod and secrets.
		"a token of cluster-b claiming cluster-a is refused": {
			authenticatedBy: "cluster-b", claimed: local, code: codes.PermissionDenied},
		"a token of cluster-b with no claim is served as cluster-b's": {
			authenticatedBy: "cluster-b", code: codes.OK},
		"a token of cluster-b claiming cluster-b is served": {
			authenticatedBy: "cluster-b", claimed: "cluster-b", code: codes.OK},
		"a token of a cluster whose pods are not in the model is told to retry": {
			authenticatedBy: "cluster-c", code: codes.Unavailable},
		"a token of cluster-c claiming cluster-b is refused": {
			authenticatedBy: "cluster-c", claimed: "cluster-b", code: codes.PermissionDenied},
		"a local token claiming another cluster is refused": {
			authenticatedBy: local, claimed: "cluster-b", code: codes.PermissionDenied},
		"a client certificate claiming another cluster is refused": {
			claimed: "cluster-b", code: codes.PermissionDenied},
		"the plaintext port refuses a node of another cluster": {
			plaintext: true, claimed: "cluster-b", code: codes.PermissionDenied},
		"the plaintext port serves a node of the local cluster": {
			plaintext: true, claimed: local, code: codes.OK},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mod := func(c *Config) { c.Authenticator, c.ClusterID = clusterAuth{}, local }
			// cluster-b's pods are in the model, cluster-c's are not.
			snap := withRemotePods(modeltest.Load(t, baseManifests), map[string][]*model.Pod{"cluster-b": {}})
			var h *harness
			if tc.plaintext {
				h = newHarnessOn(t, snap, mod, (*Server).RegisterPlaintext)
			} else {
				h = newHarness(t, snap, mod)
			}
			node := testNode("app", "client", nil)
			if tc.claimed != "" {
				node.Metadata.Fields["CLUSTER_ID"] = structpb.NewStringValue(tc.claimed)
			}
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-id", clientID)
			if tc.authenticatedBy != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-cluster", tc.authenticatedBy)
			}
			st, err := discovery.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if got := grpcstatus.Code(err); got != tc.code {
				t.Fatalf("got %v (%v), want %v", got, err, tc.code)
			}
			if tc.code == codes.OK && len(resp.GetResources()) != 1 {
				t.Fatalf("served %d listeners, want 1", len(resp.GetResources()))
			}
		})
	}
}
