package xds

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// subscribeEDS opens a stream subscribed to the echo cluster's endpoints
// and acknowledges the first response.
func subscribeEDS(t *testing.T, h *harness) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, *discovery.DiscoveryResponse) {
	t.Helper()
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}
	first := recv(t, st)
	ackEDS(t, st, first)
	return st, first
}

func ackEDS(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, r *discovery.DiscoveryResponse) {
	t.Helper()
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
}

func endpointCount(t *testing.T, r *discovery.DiscoveryResponse) int {
	t.Helper()
	var cla endpoint.ClusterLoadAssignment
	if err := r.GetResources()[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range cla.GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	return n
}

func withWorkloads(n int) string {
	m := baseManifests
	for i := range n {
		m += fmt.Sprintf("---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: w-%d, namespace: app}\nspec: {address: 10.1.0.%d, labels: {app: echo}}\n", i, i+1)
	}
	return m
}

func TestBurstOfChangesIsPushedOnce(t *testing.T) {
	// The clock stands still: no change comes after a quiet period.
	frozen := time.Now()
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) {
		c.DebounceQuiet, c.DebounceMax, c.Clock = 100*time.Millisecond, time.Hour, func() time.Time { return frozen }
	})
	st, _ := subscribeEDS(t, h)
	for i := 1; i <= 5; i++ {
		h.store.Publish(modeltest.Load(t, withWorkloads(i)))
	}
	r := recv(t, st)
	if got := endpointCount(t, r); got != 6 {
		t.Fatalf("pushed %d endpoints, want the last snapshot's 6", got)
	}
	ackEDS(t, st, r)
	noResponse(t, st, grpcgen.ClusterType)
}

// TestChangeAfterQuietIsPushedAtOnce: a change that follows a quiet
// period goes out without waiting for DebounceQuiet (an hour here); the
// one that follows it within DebounceQuiet waits.
func TestChangeAfterQuietIsPushedAtOnce(t *testing.T) {
	var skew atomic.Int64
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) {
		c.DebounceQuiet, c.DebounceMax = time.Hour, time.Hour
		c.Clock = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	st, _ := subscribeEDS(t, h)
	skew.Store(int64(2 * time.Hour))
	one := modeltest.Load(t, withWorkloads(1))
	h.store.Publish(one)
	r := recv(t, st)
	if got := endpointCount(t, r); got != 2 {
		t.Fatalf("pushed %d endpoints, want 2", got)
	}
	ackEDS(t, st, r)
	h.store.Publish(modeltest.Load(t, withWorkloads(2)))
	noResponse(t, st, grpcgen.ClusterType)
	if got := h.srv.state.Load().snap.Version; got != one.Version {
		t.Fatalf("the change right after a push was applied at once: version %s", got)
	}
}

func TestDebounceMaxBoundsTheWait(t *testing.T) {
	// The quiet period never ends within the test; only the bound pushes.
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) { c.DebounceQuiet, c.DebounceMax = time.Hour, time.Nanosecond })
	st, _ := subscribeEDS(t, h)
	h.store.Publish(modeltest.Load(t, withWorkloads(1)))
	h.store.Publish(modeltest.Load(t, withWorkloads(2)))
	if got := endpointCount(t, recv(t, st)); got < 2 {
		t.Fatalf("pushed %d endpoints", got)
	}
}

// TestNACKStormIsNotAnswered sends 1,000 NACKs of the last response: none
// is answered, so there is no re-push loop, and each is counted once.
func TestNACKStormIsNotAnswered(t *testing.T) {
	const nacks = 1000
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	st, first := subscribeEDS(t, h)
	h.store.Publish(modeltest.Load(t, withWorkloads(1)))
	second := recv(t, st)
	pushes := testutil.ToFloat64(h.srv.metrics.pushes.WithLabelValues("eds"))
	for range nacks {
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster},
			VersionInfo: first.GetVersionInfo(), ResponseNonce: second.GetNonce(), ErrorDetail: &status.Status{Message: "no"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Requests are handled in order, so the probe's response is the first
	// one after the storm only if the storm caused none.
	noResponse(t, st, grpcgen.ClusterType)
	if got := testutil.ToFloat64(h.srv.metrics.pushes.WithLabelValues("eds")); got != pushes {
		t.Errorf("EDS responses went from %v to %v under %d NACKs", pushes, got, nacks)
	}
	if got := testutil.ToFloat64(h.srv.metrics.rejects.WithLabelValues("eds")); got != nacks {
		t.Errorf("rejects %v, want %d", got, nacks)
	}
	if got := h.srv.Proxies()[0].Rejected[grpcgen.EndpointType]; got != "no" {
		t.Errorf("rejection detail %q", got)
	}

	// A model change after the storm is pushed once.
	h.store.Publish(modeltest.Load(t, withWorkloads(2)))
	if got := endpointCount(t, recv(t, st)); got != 3 {
		t.Fatalf("pushed %d endpoints after the NACK storm, want 3", got)
	}
	noResponse(t, st, grpcgen.RouteType)
	if got := testutil.ToFloat64(h.srv.metrics.pushes.WithLabelValues("eds")); got != pushes+1 {
		t.Errorf("EDS responses went from %v to %v after one change", pushes, got)
	}
}

func TestFirstModelIsAppliedAtOnceAndLaterOnesDebounced(t *testing.T) {
	m := newHandedModel()
	h := newHarness(t, nil, func(c *Config) { c.Model = m; c.DebounceQuiet, c.DebounceMax = time.Hour, time.Hour })
	if h.srv.HasSynced() {
		t.Fatal("synced before any source published")
	}
	first := modeltest.Load(t, baseManifests)
	m.hand(t, first)
	deadline := time.Now().Add(10 * time.Second)
	for !h.srv.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatal("the first model was not applied without waiting for quiet")
		}
		time.Sleep(time.Millisecond)
	}
	m.hand(t, modeltest.Load(t, strings.Replace(baseManifests, "10.0.0.2", "10.0.0.3", 1)))
	// The server has taken the later model; it has finished with it (and
	// would have applied it, were it not debounced) once it takes another.
	m.hand(t, modeltest.Load(t, strings.Replace(baseManifests, "10.0.0.2", "10.0.0.4", 1)))
	if got := h.srv.state.Load().snap.Version; got != first.Version {
		t.Fatalf("a later model was applied before the debounce: %s", got)
	}
}

// handedModel is a Model whose changes the test hands to the server one
// by one: hand returns once the server has taken the change, so a second
// hand returns once the server is done with the first.
type handedModel struct {
	current atomic.Pointer[model.Snapshot]
	changes chan *model.Snapshot
}

func newHandedModel() *handedModel {
	m := &handedModel{changes: make(chan *model.Snapshot)}
	m.current.Store(model.Build("", model.Options{}, model.Resources{}))
	return m
}

func (m *handedModel) Current() *model.Snapshot { return m.current.Load() }

func (m *handedModel) Subscribe() (<-chan *model.Snapshot, func()) { return m.changes, func() {} }

func (m *handedModel) hand(t *testing.T, snap *model.Snapshot) {
	t.Helper()
	m.current.Store(snap)
	select {
	case m.changes <- snap:
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not take a model change")
	}
}

// TestOnlyEndpointAndAuthorizationChangesArePrompt: after a quiet period,
// endpoints and authorization go out at once; a new Service, a changed
// one and a PeerAuthentication wait for quiet, so that a Service's
// EndpointSlices, made with it, go out with it.
func TestOnlyEndpointAndAuthorizationChangesArePrompt(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	const other = "---\napiVersion: v1\nkind: Service\nmetadata: {name: other, namespace: app}\nspec: {selector: {app: other}, ports: [{name: http, port: 80}]}\n"
	const policy = "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: deny, namespace: app}\nspec: {action: DENY, rules: [{from: [{source: {namespaces: [evil]}}]}]}\n"
	const peer = "---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: app}\nspec: {mtls: {mode: STRICT}}\n"
	for name, tc := range map[string]struct {
		manifests string
		prompt    bool
	}{
		"endpoints":             {withWorkloads(2), true},
		"authorization":         {baseManifests + policy, true},
		"a new service":         {baseManifests + other, false},
		"a changed service":     {strings.Replace(baseManifests, "port: 8080", "port: 8081", 1), false},
		"a peer authentication": {baseManifests + peer, false},
	} {
		if got := h.srv.prompt(modeltest.Load(t, tc.manifests)); got != tc.prompt {
			t.Errorf("%s: prompt %v, want %v", name, got, tc.prompt)
		}
	}
}
