package xds

import (
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const newService = `---
apiVersion: v1
kind: Service
metadata: {name: added, namespace: app}
spec:
  clusterIP: 10.96.0.30
  selector: {app: added}
  ports: [{name: http, port: 80, targetPort: 8080}]
`

const addedCluster = "outbound|80||added.app.svc.cluster.local"

// warmedSidecar connects an Envoy sidecar over Delta ADS and walks it
// through Envoy's first requests, acknowledging every response.
func warmedSidecar(t *testing.T, h *harness) deltaStream {
	t.Helper()
	st := h.deltaStream(clientID)
	ask := func(req *discovery.DeltaDiscoveryRequest) *discovery.DeltaDiscoveryResponse {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		r := recvDelta(t, st)
		ackDelta(t, st, r)
		return r
	}
	cds := ask(&discovery.DeltaDiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.ClusterType})
	var eds []string
	for _, r := range cds.GetResources() {
		if r.GetName() != addedCluster && slices.Contains([]string{"outbound|8080||echo.app.svc.cluster.local", "outbound|80||web.app.svc.cluster.local", "outbound|5432||web.app.svc.cluster.local"}, r.GetName()) {
			eds = append(eds, r.GetName())
		}
	}
	ask(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: eds})
	ask(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ListenerType})
	ask(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResourceNamesSubscribe: []string{"80", "8080"}})
	return st
}

func ackDelta(t *testing.T, st deltaStream, r *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
}

func names(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	return out
}

// TestNewClustersEndpointsGoOutBeforeListeners pushes a new service: the
// sidecar gets its cluster, then, when it asks for them, its endpoints,
// and only then the route that sends traffic to it.
func TestNewClustersEndpointsGoOutBeforeListeners(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
	st := warmedSidecar(t, h)
	h.store.Publish(modeltest.Load(t, envoyManifests+newService))
	cds := recvDelta(t, st)
	if cds.GetTypeUrl() != resource.ClusterType || !slices.Contains(names(cds), addedCluster) {
		t.Fatalf("first a %s response with %v, want the new cluster", shortType(cds.GetTypeUrl()), names(cds))
	}
	ackDelta(t, st, cds)
	// Responses are sent in order: a listener queued with the clusters
	// would come before the answer to this request.
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{addedCluster}}); err != nil {
		t.Fatal(err)
	}
	eds := recvDelta(t, st)
	if eds.GetTypeUrl() != resource.EndpointType || !slices.Equal(names(eds), []string{addedCluster}) {
		t.Fatalf("then a %s response with %v, want the new cluster's endpoints", shortType(eds.GetTypeUrl()), names(eds))
	}
	ackDelta(t, st, eds)
	if rds := recvDelta(t, st); rds.GetTypeUrl() != resource.RouteType || !slices.Contains(names(rds), "80") {
		t.Fatalf("then a %s response with %v, want the route of port 80", shortType(rds.GetTypeUrl()), names(rds))
	}
}

// TestListenersAreNotHeldForeverForASidecarThatDoesNotAsk pushes a new
// service to a sidecar that never asks for its endpoints: its routes
// come after the hold.
func TestListenersAreNotHeldForeverForASidecarThatDoesNotAsk(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
	h.srv.warmingHold = 50 * time.Millisecond
	st := warmedSidecar(t, h)
	h.store.Publish(modeltest.Load(t, envoyManifests+newService))
	if cds := recvDelta(t, st); cds.GetTypeUrl() != resource.ClusterType {
		t.Fatalf("first a %s response", shortType(cds.GetTypeUrl()))
	}
	if rds := recvDelta(t, st); rds.GetTypeUrl() != resource.RouteType {
		t.Fatalf("then a %s response, want the routes", shortType(rds.GetTypeUrl()))
	}
}
