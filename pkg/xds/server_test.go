package xds

import (
	"context"
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

const (
	echoListener = "echo.app.svc.cluster.local:8080"
	echoCluster  = "outbound|8080||echo.app.svc.cluster.local"
	clientID     = "spiffe://cluster.local/ns/app/sa/client"
)

// failingAuth fails every authentication with err.
type failingAuth struct{ err error }

func (failingAuth) Kind() string                                          { return "failing" }
func (f failingAuth) Authenticate(context.Context) (*authn.Caller, error) { return nil, f.err }

func TestStreamRejections(t *testing.T) {
	wrongType, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "app", "SERVICE_ACCOUNT": "client", "INSTANCE_IPS": 1})
	tests := map[string]struct {
		id    string
		authn authn.Authenticator // default: headerAuth
		req   *discovery.DiscoveryRequest
		code  codes.Code
	}{
		"a caller whose token cannot be reviewed now is told to retry, not refused": {
			id:    clientID,
			authn: failingAuth{fmt.Errorf("review token: %w: connection refused", authn.ErrUnavailable)},
			req:   &discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType},
			code:  codes.Unavailable,
		},
		"a node claiming another service account is denied": {
			id:   clientID,
			req:  &discovery.DiscoveryRequest{Node: testNode("app", "admin", nil), TypeUrl: grpcgen.ListenerType},
			code: codes.PermissionDenied,
		},
		"a node claiming another namespace is denied": {
			id:   clientID,
			req:  &discovery.DiscoveryRequest{Node: testNode("kube-system", "client", nil), TypeUrl: grpcgen.ListenerType},
			code: codes.PermissionDenied,
		},
		"metadata of the wrong type is an invalid argument": {
			id:   clientID,
			req:  &discovery.DiscoveryRequest{Node: &core.Node{Id: "x", Metadata: wrongType}, TypeUrl: grpcgen.ListenerType},
			code: codes.InvalidArgument,
		},
		"a first request without node is an invalid argument": {
			id:   clientID,
			req:  &discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType},
			code: codes.InvalidArgument,
		},
		"a caller without credentials is unauthenticated": {
			id:   "",
			req:  &discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType},
			code: codes.Unauthenticated,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) {
				if tc.authn != nil {
					c.Authenticator = tc.authn
				}
			})
			st := h.stream(tc.id)
			if err := st.Send(tc.req); err != nil {
				t.Fatal(err)
			}
			_, err := st.Recv()
			if got := grpcstatus.Code(err); got != tc.code {
				t.Fatalf("got %v (%v), want %v", got, err, tc.code)
			}
		})
	}
}

func TestNewStreamsAreRateLimited(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) { c.StreamRate, c.StreamBurst = 0.001, 1 })
	first := h.stream(clientID)
	if err := first.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	recv(t, first)
	second := h.stream(clientID)
	_, err := second.Recv()
	if got := grpcstatus.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("second stream: got %v, want ResourceExhausted", err)
	}
}

func TestProtocol(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	st := h.stream(clientID)
	send := func(r *discovery.DiscoveryRequest) {
		t.Helper()
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}

	// An unknown type URL is ignored and the stream lives on.
	send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: "type.googleapis.com/unknown.Type", ResourceNames: []string{"x"}})
	send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}})
	lds := recv(t, st)
	if lds.GetTypeUrl() != grpcgen.ListenerType || len(lds.GetResources()) != 1 {
		t.Fatalf("first LDS response: %v", lds)
	}
	var l listener.Listener
	if err := lds.GetResources()[0].UnmarshalTo(&l); err != nil || l.GetName() != echoListener {
		t.Fatalf("listener %q, %v", l.GetName(), err)
	}

	// A NACK is recorded and the same version is not sent again.
	send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener},
		ResponseNonce: lds.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: "bad listener"}})
	probe := noResponse(t, st, grpcgen.ClusterType)
	ps := h.srv.Proxies()
	if len(ps) != 1 || ps[0].Rejected[grpcgen.ListenerType] != "bad listener" {
		t.Fatalf("proxy status after NACK: %+v", ps)
	}

	// A stale nonce is ignored: a new subscription under an old nonce gets
	// no answer, and the stream lives on.
	send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener, "other:1"}, ResponseNonce: "stale"})
	probeCluster(t, st, probe.GetNonce())

	// Empty names after named ones unsubscribe: an empty response, not the
	// wildcard set.
	send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResponseNonce: lds.GetNonce()})
	un := recv(t, st)
	if un.GetTypeUrl() != grpcgen.ListenerType || len(un.GetResources()) != 0 {
		t.Fatalf("unsubscribe answered with %d %s resources", len(un.GetResources()), un.GetTypeUrl())
	}
}

// probeCluster asks for an unknown cluster and returns the answer, which
// must be the next response.
func probeCluster(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, nonce string) *discovery.DiscoveryResponse {
	t.Helper()
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ClusterType, ResourceNames: []string{echoCluster}, ResponseNonce: nonce}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if r.GetTypeUrl() != grpcgen.ClusterType {
		t.Fatalf("got an unexpected %s response", r.GetTypeUrl())
	}
	return r
}

func TestModelChangeIsPushed(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}
	first := recv(t, st)
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster}, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}

	h.store.Publish(modeltest.Load(t, baseManifests+`---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-2, namespace: app}
spec: {address: 10.0.0.3, labels: {app: echo}, serviceAccount: echo}
`))
	second := recv(t, st)
	if second.GetVersionInfo() == first.GetVersionInfo() || second.GetTypeUrl() != grpcgen.EndpointType {
		t.Fatalf("push: %s version %s after %s", second.GetTypeUrl(), second.GetVersionInfo(), first.GetVersionInfo())
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster}, VersionInfo: second.GetVersionInfo(), ResponseNonce: second.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	noResponse(t, st, grpcgen.ClusterType) // the ACK is processed

	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
		if f.GetName() == "pilot_proxy_convergence_time" && f.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
			t.Errorf("convergence samples: %v", f.GetMetric()[0].GetHistogram().GetSampleCount())
		}
		if f.GetName() == "pilot_xds" && f.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("connected proxies: %v", f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	for _, name := range []string{"pilot_xds", "pilot_xds_pushes", "pilot_xds_push_time", "pilot_proxy_convergence_time", "pilot_xds_config_size_bytes"} {
		if !got[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

func TestEmptyFirstRequestIsWildcard(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if len(r.GetResources()) != 1 {
		t.Fatalf("wildcard CDS: %d clusters", len(r.GetResources()))
	}
	// An empty ACK keeps the wildcard: nothing more is sent.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, st); r.GetTypeUrl() != grpcgen.ListenerType {
		t.Fatalf("got an unexpected %s response", r.GetTypeUrl())
	}
}

func TestStreamsEndUnavailableWhenTheServerStops(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	sotw := h.stream(clientID)
	if err := sotw.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	recv(t, sotw)
	delta := h.deltaStream(clientID)
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNamesSubscribe: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	recvDelta(t, delta)

	h.stopRun()
	if _, err := sotw.Recv(); grpcstatus.Code(err) != codes.Unavailable {
		t.Errorf("state-of-the-world stream after the server stopped: %v, want Unavailable", err)
	}
	if _, err := delta.Recv(); grpcstatus.Code(err) != codes.Unavailable {
		t.Errorf("incremental stream after the server stopped: %v, want Unavailable", err)
	}
}
