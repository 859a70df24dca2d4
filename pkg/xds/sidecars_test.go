package xds

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// sidecarManifests add a service of namespace other and istiod's own.
const sidecarManifests = envoyManifests + `---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: other}
spec:
  clusterIP: 10.96.1.20
  ports: [{name: tcp, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: istiod, namespace: istio-system}
spec:
  clusterIP: 10.96.9.1
  ports: [{name: grpc-xds, port: 15012}]
`

func scopedTo(hosts string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: app}\nspec:\n  egress: [{hosts: [" + hosts + "]}]\n"
}

func clustersOf(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		if n := unmarshal[*cluster.Cluster](t, a, &cluster.Cluster{}).GetName(); strings.HasPrefix(n, "outbound|") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// TestSidecarChangeReachesOnlyTheProxiesItConfigures: a Sidecar of
// namespace app scopes app's sidecar at once, and its change is pushed to
// app's sidecar and not to other's, which it does not configure.
func TestSidecarChangeReachesOnlyTheProxiesItConfigures(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, sidecarManifests), nil)
	open := func(id string, node func() *discovery.DiscoveryRequest) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, *discovery.DiscoveryResponse) {
		st := h.stream(id)
		if err := st.Send(node()); err != nil {
			t.Fatal(err)
		}
		r := recv(t, st)
		ack(t, st, r)
		return st, r
	}
	app, first := open(clientID, func() *discovery.DiscoveryRequest {
		return &discovery.DiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.ClusterType}
	})
	other, otherFirst := open("spiffe://cluster.local/ns/other/sa/db", func() *discovery.DiscoveryRequest {
		return &discovery.DiscoveryRequest{Node: envoyNode("other", "db", "10.0.1.9"), TypeUrl: resource.ClusterType}
	})
	if got := clustersOf(t, first); len(got) != 5 || !slices.Equal(got, clustersOf(t, otherFirst)) {
		t.Fatalf("without a Sidecar both see every service: %q and %q", got, clustersOf(t, otherFirst))
	}

	h.store.Publish(modeltest.Load(t, sidecarManifests+scopedTo(`"./*", "istio-system/*"`)))
	r := recv(t, app)
	want := []string{"outbound|15012||istiod.istio-system.svc.cluster.local", "outbound|5432||web.app.svc.cluster.local",
		"outbound|8080||echo.app.svc.cluster.local", "outbound|80||web.app.svc.cluster.local"}
	if got := clustersOf(t, r); !slices.Equal(got, want) {
		t.Fatalf("app's clusters under its Sidecar\n got %q\nwant %q", got, want)
	}
	ack(t, app, r)
	noResponse(t, other, resource.RouteType)
	onlyRegenerated(t, h, "app")

	h.store.Publish(modeltest.Load(t, sidecarManifests+scopedTo(`"./web.app.svc.cluster.local", "istio-system/*"`)))
	r = recv(t, app)
	if got := clustersOf(t, r); len(got) != 3 {
		t.Fatalf("app's clusters after its Sidecar changed: %q", got)
	}
	ack(t, app, r)
	noResponse(t, other, resource.EndpointType) // another probe: the same one is not answered twice
	onlyRegenerated(t, h, "app")
	if n := testutil.ToFloat64(h.srv.metrics.pushTriggers.WithLabelValues("config")); n < 2 {
		t.Errorf("Sidecar changes counted as %v config pushes", n)
	}
}

// TestSidecarHidingIstiodIsReported: a Sidecar whose egress leaves out
// istiod's Service is logged once and counted, the proxies it configures
// keep being served, and the count goes once it is gone.
func TestSidecarHidingIstiodIsReported(t *testing.T) {
	rec, log := logtest.New(t)
	h := newHarness(t, modeltest.Load(t, sidecarManifests+scopedTo(`"./*"`)), func(c *Config) {
		c.Logger = log
		c.SystemNamespace = "istio-system"
	})
	gauge := func() float64 {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Sidecar", "hides_istiod"))
	}
	waitFor(t, "the Sidecar hiding istiod counted", func() bool { return gauge() == 1 })
	if n := rec.Count("sidecar resource hides istiod"); n != 1 {
		t.Errorf("logged %d times", n)
	}
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if got := clustersOf(t, recv(t, st)); len(got) != 3 {
		t.Errorf("the proxy it configures gets %q", got)
	}
	h.store.Publish(modeltest.Load(t, sidecarManifests+scopedTo(`"./*", "istio-system/istiod.istio-system.svc.cluster.local"`)))
	waitFor(t, "the count gone with the Sidecar's fix", func() bool { return testutil.CollectAndCount(h.srv.metrics.failClosed) == 0 })

	// More hosts than are read: counted and logged, the first ones read.
	many := make([]string, model.MaxSidecarHosts+1)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprintf("ns%d/*", i))
	}
	many[0] = `"istio-system/*"`
	h.store.Publish(modeltest.Load(t, sidecarManifests+scopedTo(strings.Join(many, ", "))))
	waitFor(t, "the Sidecar over the limit counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Sidecar", "hosts_over_limit")) == 1
	})
	if n := rec.Count("more egress hosts than are read"); n != 1 {
		t.Errorf("over the limit logged %d times", n)
	}
}

// onlyRegenerated waits for every proxy to have been brought up to the
// current push state, then checks that the state generated clusters for
// the proxies of namespace ns alone: the others kept their responses.
func onlyRegenerated(t *testing.T, h *harness, ns string) {
	t.Helper()
	st := h.srv.state.Load()
	waitFor(t, "every proxy brought up to the push", func() bool {
		for _, p := range h.srv.proxies() {
			p.mu.Lock()
			seq := p.last[typeCluster].basis.seq
			p.mu.Unlock()
			if seq != st.seq {
				return false
			}
		}
		return true
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	generated := 0
	for k := range st.shared {
		if k.typeURL != typeCluster {
			continue
		}
		generated++
		if !strings.HasPrefix(k.proxy, "envoy\x00"+strconv.Itoa(len(ns))+":"+ns) {
			t.Errorf("clusters generated again for scope %q, which the Sidecar does not configure", k.proxy)
		}
	}
	if generated == 0 {
		t.Errorf("no clusters generated for %s", ns)
	}
}

// TestSidecarFieldsProxylessDoNotReadAreReported: while a proxyless
// gRPC client is connected, each field of a Sidecar that proxyless
// clients do not read is logged and counted once; a Sidecar that only
// scopes egress, which they honour, is not reported.
func TestSidecarFieldsProxylessDoNotReadAreReported(t *testing.T) {
	rec, log := logtest.New(t)
	h := newHarness(t, modeltest.Load(t, sidecarManifests), func(c *Config) { c.Logger = log })
	st := h.stream(clientID)
	names := []string{"web.app.svc.cluster.local:80"}
	if err := st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: resource.ListenerType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	ackNames(t, st, recv(t, st), names)
	gauge := func() float64 {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("Sidecar", "proxyless_ignored"))
	}
	seq := h.srv.state.Load().seq
	h.store.Publish(modeltest.Load(t, sidecarManifests+scopedTo(`"./*", "istio-system/*"`)))
	waitFor(t, "the Sidecar pushed", func() bool { return h.srv.state.Load().seq > seq })
	settled(t, h)
	if g := gauge(); g != 0 {
		t.Fatalf("a Sidecar scoping egress alone counted %v times as not honoured", g)
	}
	h.store.Publish(modeltest.Load(t, sidecarManifests+`---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: app}
spec:
  ingress: [{port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: "127.0.0.1:8080"}]
  egress: [{hosts: ["./*"]}]
  outboundTrafficPolicy: {mode: ALLOW_ANY}
`))
	waitFor(t, "the ingress listener and outboundTrafficPolicy counted as not read by proxyless gRPC", func() bool { return gauge() == 2 })
	if n := rec.Count("not honoured by proxyless gRPC"); n != 2 {
		t.Errorf("logged %d times, want 2", n)
	}
}

// TestProxylessClientsReadTheirSidecar: a Sidecar of the client's
// namespace that hides a service takes its listener away from a connected
// proxyless client (the listener is absent, as Istio answers); a client
// of another namespace keeps it.
func TestProxylessClientsReadTheirSidecar(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, sidecarManifests), nil)
	const name = "db.other.svc.cluster.local:5432"
	open := func(id, ns string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		st := h.stream(id)
		if err := st.Send(&discovery.DiscoveryRequest{Node: testNode(ns, "client", nil), TypeUrl: resource.ListenerType, ResourceNames: []string{name}}); err != nil {
			t.Fatal(err)
		}
		r := recv(t, st)
		if len(r.GetResources()) != 1 {
			t.Fatalf("%s: %d listeners before the Sidecar, want 1", ns, len(r.GetResources()))
		}
		ackNames(t, st, r, []string{name})
		return st
	}
	app := open(clientID, "app")
	open("spiffe://cluster.local/ns/other/sa/client", "other")
	otherID := testNode("other", "client", nil).GetId()
	before := settled(t, h)
	h.store.Publish(modeltest.Load(t, sidecarManifests+scopedTo(`"./*", "istio-system/*"`)))
	r := recv(t, app)
	if len(r.GetResources()) != 0 {
		t.Fatalf("app's client still has %d listeners for %s, a service its Sidecar hides", len(r.GetResources()), name)
	}
	ackNames(t, app, r, []string{name})
	h.store.Publish(modeltest.Load(t, sidecarManifests))
	r = recv(t, app)
	if len(r.GetResources()) != 1 {
		t.Fatalf("the Sidecar removed: app's client has %d listeners, want 1", len(r.GetResources()))
	}
	ackNames(t, app, r, []string{name})
	after := settled(t, h)
	if before[otherID][resource.ListenerType] != after[otherID][resource.ListenerType] {
		t.Error("other's client, which no Sidecar configures, was sent its listeners again")
	}
}

// ackNames acknowledges r on the stream, subscribing to names still.
func ackNames(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, r *discovery.DiscoveryResponse, names []string) {
	t.Helper()
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
}

// TestSidecarChangeOverDelta: over incremental ADS, a Sidecar's change
// removes what it hides from the proxy it configures, and the proxy of
// another namespace is brought up to date without its clusters being
// generated again.
func TestSidecarChangeOverDelta(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, sidecarManifests), nil)
	open := func(id string, node *core.Node) deltaStream {
		st := h.deltaStream(id)
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		r := recvDelta(t, st)
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	app := open(clientID, envoyNode("app", "client", "10.0.0.9"))
	open("spiffe://cluster.local/ns/other/sa/db", envoyNode("other", "db", "10.0.1.9"))
	h.store.Publish(modeltest.Load(t, sidecarManifests+scopedTo(`"./*", "istio-system/*"`)))
	r := recvDelta(t, app)
	if !slices.Equal(r.GetRemovedResources(), []string{"outbound|5432||db.other.svc.cluster.local"}) || len(r.GetResources()) != 0 {
		t.Fatalf("app's delta: %d resources, removed %q; want db's cluster removed alone", len(r.GetResources()), r.GetRemovedResources())
	}
	st := h.srv.state.Load()
	waitFor(t, "every proxy brought up to the push", func() bool {
		for _, p := range h.srv.proxies() {
			p.mu.Lock()
			d := p.delta[typeCluster]
			seq := d.basis.seq
			p.mu.Unlock()
			if seq != st.seq {
				return false
			}
		}
		return true
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	for k := range st.shared {
		if k.typeURL == typeCluster && strings.HasPrefix(k.proxy, "envoy\x005:other") {
			t.Errorf("clusters generated again for other's scope %q", k.proxy)
		}
	}
}
