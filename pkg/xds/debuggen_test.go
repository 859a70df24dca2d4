package xds

import (
	"encoding/json"
	"testing"
	"time"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// debugNode is the node istioctl sends: GENERATOR=event, and a node ID
// and metadata of its own making.
func debugNode(ns string) *core.Node {
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "event", "NAMESPACE": ns, "SERVICE_ACCOUNT": "default"})
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: "sidecar~10.9.9.9~test-1.default~default.svc.cluster.local", Metadata: md}
}

// debugAsk sends one debug request on a new stream as identity id.
func debugAsk(h *harness, id, typeURL string, names ...string) *discovery.DiscoveryResponse {
	h.t.Helper()
	st := h.stream(id)
	// istioctl (Istio's ADS client) makes up a nonce for every request.
	if err := st.Send(&discovery.DiscoveryRequest{Node: debugNode("istio-system"), TypeUrl: typeURL, ResourceNames: names, ResponseNonce: time.Now().String()}); err != nil {
		h.t.Fatal(err)
	}
	return recv(h.t, st)
}

type syncStatus map[string]map[string]statusv3.ConfigStatus // proxy ID → type → status

func syncStatuses(t *testing.T, r *discovery.DiscoveryResponse) syncStatus {
	t.Helper()
	out := syncStatus{}
	for _, a := range r.GetResources() {
		var cc statusv3.ClientConfig
		if err := a.UnmarshalTo(&cc); err != nil {
			t.Fatal(err)
		}
		types := map[string]statusv3.ConfigStatus{}
		for _, x := range cc.GetGenericXdsConfigs() {
			types[x.GetTypeUrl()] = x.GetConfigStatus()
		}
		out[cc.GetNode().GetId()] = types
		for k := range cc.GetNode().GetMetadata().GetFields() {
			if k != "NAMESPACE" && k != "CLUSTER_ID" && k != "ISTIO_VERSION" {
				t.Errorf("syncz shows node metadata %s", k)
			}
		}
	}
	return out
}

// istioctl's debug types: syncz reports each proxy's per-type status
// (SYNCED, STALE, ERROR) with istiod's identifier, to callers of istiod's
// namespace for every proxy and to others for their own namespace only;
// config_dump is what istiod generates for one proxy; debug clients get
// nothing else, are no proxies, and are refused without TLS.
func TestDebugTypes(t *testing.T) {
	h := newTLSHarness(t, modeltest.Load(t, baseManifests), func(c *Config) {
		c.SystemNamespace = "istio-system"
		c.ControlPlane = debug.ControlPlane{ID: "istiod-abc", Version: "1.2.3"}
	})
	connect := func(id, ns, pod string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		st := h.stream(id)
		node := testNode(ns, "client", nil)
		node.Id = "sidecar~10.0.0.1~" + pod + "." + ns + "~" + ns + ".svc.cluster.local"
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// synced ACKs its listener; stale never answers; nacked refuses it.
	synced := connect(clientID, "app", "synced")
	lds := recv(t, synced)
	if err := synced.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}, ResponseNonce: lds.GetNonce(), VersionInfo: lds.GetVersionInfo()}); err != nil {
		t.Fatal(err)
	}
	if err := synced.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ClusterType, ResourceNames: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}
	cds := recv(t, synced)
	if err := synced.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ClusterType, ResourceNames: []string{echoCluster}, ResponseNonce: cds.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	stale := connect("spiffe://cluster.local/ns/other/sa/client", "other", "stale")
	recv(t, stale)
	nacked := connect(clientID, "app", "nacked")
	bad := recv(t, nacked)
	if err := nacked.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}, ResponseNonce: bad.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "bad listener"}}); err != nil {
		t.Fatal(err)
	}
	noResponse(t, nacked, grpcgen.ClusterType) // the NACK has been recorded

	want := syncStatus{
		"synced.app":  {grpcgen.ListenerType: statusv3.ConfigStatus_SYNCED, grpcgen.ClusterType: statusv3.ConfigStatus_SYNCED},
		"stale.other": {grpcgen.ListenerType: statusv3.ConfigStatus_STALE},
		"nacked.app":  {grpcgen.ListenerType: statusv3.ConfigStatus_ERROR, grpcgen.ClusterType: statusv3.ConfigStatus_STALE},
	}
	var got syncStatus
	for range 50 { // the ACK of synced's CDS may trail the probe
		r := debugAsk(h, "spiffe://cluster.local/ns/istio-system/sa/default", debug.TypeDebugSyncz)
		if got = syncStatuses(t, r); equalStatus(got, want) {
			var cp struct {
				Component, ID string
				Info          struct{ Version string }
			}
			if err := json.Unmarshal([]byte(r.GetControlPlane().GetIdentifier()), &cp); err != nil ||
				cp.Component != "istiod" || cp.ID != "istiod-abc" || cp.Info.Version != "1.2.3" {
				t.Errorf("control plane identifier %q: %+v %v", r.GetControlPlane().GetIdentifier(), cp, err)
			}
			break
		}
	}
	if !equalStatus(got, want) {
		t.Fatalf("syncz for istiod's namespace:\n got %v\nwant %v", got, want)
	}

	// A caller of another namespace sees its own namespace's proxies only.
	if got := syncStatuses(t, debugAsk(h, "spiffe://cluster.local/ns/other/sa/default", debug.TypeDebugSyncz)); len(got) != 1 || got["stale.other"] == nil {
		t.Errorf("syncz for namespace other: %v", got)
	}
	if got := syncStatuses(t, debugAsk(h, "spiffe://cluster.local/ns/third/sa/default", debug.TypeDebugSyncz)); len(got) != 0 {
		t.Errorf("syncz for a namespace without proxies: %v", got)
	}

	// config_dump: the listeners istiod generates for the proxy, to
	// istiod's namespace and to the proxy's own; nothing to another.
	dump := debugAsk(h, "spiffe://cluster.local/ns/app/sa/admin", debug.TypeDebugConfigDump, "synced.app")
	var listeners admin.ListenersConfigDump
	for _, a := range dump.GetResources() {
		if a.MessageIs(&listeners) {
			if err := a.UnmarshalTo(&listeners); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(dump.GetResources()) != 3 || len(listeners.GetDynamicListeners()) != 1 || listeners.GetDynamicListeners()[0].GetName() != echoListener {
		t.Errorf("config dump of synced.app: %d sections, listeners %v", len(dump.GetResources()), listeners.GetDynamicListeners())
	}
	if r := debugAsk(h, "spiffe://cluster.local/ns/other/sa/default", debug.TypeDebugConfigDump, "synced.app"); len(r.GetResources()) != 0 {
		t.Errorf("namespace other was given synced.app's config dump")
	}

	// A debug client is served debug types only: its CDS request is
	// ignored, and the syncz asked after it is the next response.
	st := h.stream("spiffe://cluster.local/ns/istio-system/sa/default")
	if err := st.Send(&discovery.DiscoveryRequest{Node: debugNode("istio-system"), TypeUrl: grpcgen.ClusterType, ResourceNames: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: debug.TypeDebugSyncz}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, st); r.GetTypeUrl() != debug.TypeDebugSyncz {
		t.Errorf("a debug client was sent %s", r.GetTypeUrl())
	}
	// And a proxy is never served the debug types.
	if r := noResponse(t, synced, grpcgen.RouteType); r.GetTypeUrl() != grpcgen.RouteType {
		t.Errorf("a proxy was sent %s", r.GetTypeUrl())
	}
	if err := synced.Send(&discovery.DiscoveryRequest{TypeUrl: debug.TypeDebugSyncz}); err != nil {
		t.Fatal(err)
	}
	noResponse(t, synced, grpcgen.EndpointType)
	if n := len(h.srv.Proxies()); n != 3 {
		t.Errorf("%d proxies; debug clients must not count", n)
	}
}

func equalStatus(a, b syncStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for id, types := range b {
		if len(a[id]) != len(types) {
			return false
		}
		for t, s := range types {
			if a[id][t] != s {
				return false
			}
		}
	}
	return true
}

// Without TLS, or without credentials, a debug client is refused.
func TestDebugTypesNeedAuthenticatedTLS(t *testing.T) {
	for name, h := range map[string]*harness{
		"no TLS":         newHarness(t, modeltest.Load(t, baseManifests), nil),
		"no credentials": newTLSHarness(t, modeltest.Load(t, baseManifests), nil),
	} {
		t.Run(name, func(t *testing.T) {
			id := "spiffe://cluster.local/ns/istio-system/sa/default"
			if name == "no credentials" {
				id = ""
			}
			for _, req := range []*discovery.DiscoveryRequest{
				{Node: debugNode("istio-system"), TypeUrl: debug.TypeDebugSyncz},
				{Node: debugNode("istio-system"), TypeUrl: debug.TypeDebug, ResourceNames: []string{"unsupported"}},
			} {
				st := h.stream(id)
				if err := st.Send(req); err != nil {
					t.Fatal(err)
				}
				_, err := st.Recv()
				if status.Code(err) != codes.Unauthenticated {
					t.Errorf("%s: got %v, want Unauthenticated", req.GetTypeUrl(), err)
				}
			}
		})
	}
}
