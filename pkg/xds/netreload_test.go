package xds

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// networksFile runs a real meshNetworks watcher on a file of its own and
// returns it with a function that rewrites the file, and the reload
// metrics.
func networksFile(t *testing.T, initial string) (*meshconfig.NetworksWatcher, func(string), *prometheus.Registry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "meshNetworks")
	write := func(doc string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(initial)
	first, err := meshconfig.ReadNetworksFile(path)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics, err := meshconfig.NewReloadMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := meshconfig.NewNetworksWatcher(meshconfig.NetworksWatcherConfig{Path: path, Initial: first, Resync: time.Hour, Metrics: metrics, Logger: catest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, write, reg
}

// gathered is the value of metric name with labels in reg; 0 if absent.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

// loadOf is the addresses of the load assignment of cluster name in r,
// sorted; nil when r has none.
func loadOf(t *testing.T, r *discovery.DiscoveryResponse, name string) []string {
	t.Helper()
	for _, a := range r.GetResources() {
		cla := unmarshal[*endpoint.ClusterLoadAssignment](t, a, &endpoint.ClusterLoadAssignment{})
		if cla.GetClusterName() != name {
			continue
		}
		out := []string{}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				s := e.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, fmt.Sprintf("%s:%d", s.GetAddress(), s.GetPortValue()))
			}
		}
		slices.Sort(out)
		return out
	}
	return nil
}

// remoteNetworkWorld has service echo.app with one endpoint on net-b
// (cluster b) accepting mTLS, and one without a network, and no gateway
// Service: net-b's gateways are meshNetworks'.
func remoteNetworkWorld(version string) *model.Snapshot {
	echo := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
		Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Endpoints: map[uint32][]model.Endpoint{80: {
			{Address: "10.20.0.1", Port: 8080, Namespace: "app", ServiceAccount: "echo", Network: "net-b", Cluster: "b",
				Labels: map[string]string{model.TLSModeLabel: "istio", model.NetworkLabel: "net-b"}},
		}}}
	plain := &model.Service{Meta: model.Meta{Name: "plain", Namespace: "app"}, Addresses: []string{"10.96.0.11"},
		Ports:     []model.Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Endpoints: map[uint32][]model.Endpoint{80: {{Address: "10.10.0.5", Port: 8080, Namespace: "app"}}}}
	return model.Build(version, model.Options{}, model.Resources{Services: []*model.Service{echo, plain}})
}

// TestAMeshNetworksChangeReroutesOtherNetworksEndpoints: a sidecar of
// net-a reaches net-b's endpoint through the gateway meshNetworks names;
// when the file names another address, the load assignment is pushed
// again with it, and nothing else is (no clusters or listeners: not a
// full push). A file that cannot be used keeps the last good networks,
// logged and counted; a later good one applies.
func TestAMeshNetworksChangeReroutesOtherNetworksEndpoints(t *testing.T) {
	const (
		echo  = "outbound|80||echo.app.svc.cluster.local"
		plain = "outbound|80||plain.app.svc.cluster.local"
	)
	nets := func(addr string) string {
		return "networks:\n  net-b:\n    endpoints: [{fromRegistry: b}]\n    gateways: [{address: " + addr + ", port: 15443}]\n"
	}
	watcher, write, reg := networksFile(t, nets("192.0.2.1"))
	h := newHarness(t, remoteNetworkWorld("v1"), func(c *Config) { c.Networks = watcher })
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: networkNode("net-a"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	ack(t, st, recv(t, st))
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{echo, plain}}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if got := loadOf(t, r, echo); !slices.Equal(got, []string{"192.0.2.1:15443"}) {
		t.Fatalf("echo's endpoints %v, want net-b's gateway", got)
	}
	ackNames(t, st, r, []string{echo, plain})
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	ack(t, st, recv(t, st))
	fullBefore := testutil.ToFloat64(h.srv.metrics.pushTriggers.WithLabelValues("config"))

	write(nets("192.0.2.9"))
	r = recv(t, st)
	if r.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("first push after the change: %s, want load assignments only", r.GetTypeUrl())
	}
	if got := loadOf(t, r, echo); !slices.Equal(got, []string{"192.0.2.9:15443"}) {
		t.Fatalf("echo's endpoints after the gateway moved %v, want the new address", got)
	}
	ackNames(t, st, r, []string{echo, plain})
	probe := noResponse(t, st, resource.RouteType) // no clusters or listeners follow
	ackNames(t, st, probe, []string{"probe.none.svc.cluster.local:1"})
	if got := testutil.ToFloat64(h.srv.metrics.pushTriggers.WithLabelValues("config")); got != fullBefore {
		t.Fatalf("%v config pushes after a meshNetworks change, want none", got-fullBefore)
	}

	// Gateways of net-b gone: net-b's endpoint is left out.
	write("networks: {}\n")
	r = recv(t, st)
	if got := loadOf(t, r, echo); r.GetTypeUrl() != resource.EndpointType || len(got) != 0 {
		t.Fatalf("after the gateways went: %s, echo's endpoints %v, want none (net-b has no gateway)", r.GetTypeUrl(), got)
	}
	ackNames(t, st, r, []string{echo, plain})

	write("networks:\n  net-b:\n    gateways: [{address: 192.0.2.7, port: 0}]\n")
	waitFor(t, "the refusal counted", func() bool {
		return gathered(t, reg, "bulwark_config_reloads_total", map[string]string{"config": "meshNetworks", "result": "rejected"}) == 1
	})
	if got := gathered(t, reg, "bulwark_config_rejected", map[string]string{"config": "meshNetworks"}); got != 1 {
		t.Fatalf("bulwark_config_rejected %v while the file is refused, want 1", got)
	}
	// A request for other routes is answered next: nothing was pushed.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.RouteType, ResourceNames: []string{"probe.two.svc.cluster.local:1"},
		VersionInfo: probe.GetVersionInfo(), ResponseNonce: probe.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, st); r.GetTypeUrl() != resource.RouteType {
		t.Fatalf("got a %s push after a refused file", r.GetTypeUrl())
	}
	if got := watcher.Current(); len(got.Networks) != 0 {
		t.Fatalf("a refused file replaced the networks in force: %+v", got)
	}
	if got := h.srv.mesh.Load().Settings().MeshNetworks; len(got.Networks) != 0 {
		t.Fatalf("a refused file reached the server: %+v", got)
	}

	write(nets("192.0.2.3"))
	r = recv(t, st)
	if got := loadOf(t, r, echo); !slices.Equal(got, []string{"192.0.2.3:15443"}) {
		t.Fatalf("after a good file again: %v, want the new gateway", got)
	}
}

// TestAnSNIDNATClusterLeftOutIsCounted: an east-west gateway's SNI-DNAT
// cluster of a DNS_ROUND_ROBIN entry of the mesh without an mTLS
// endpoint is not generated (Envoy would refuse it), and that is counted.
func TestAnSNIDNATClusterLeftOutIsCounted(t *testing.T) {
	snap := modeltest.Load(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: cache, namespace: app}
spec:
  hosts: [cache.internal.example]
  location: MESH_INTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 6379, name: tcp-redis, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: app}
spec:
  hosts: [db.internal.example]
  location: MESH_INTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 5432, name: tcp-db, protocol: TCP}]
  endpoints: [{address: db-1.internal.example, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: gw}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.example"]
`)
	h := newHarness(t, snap, nil)
	waitFor(t, "the SNI-DNAT cluster left out counted", func() bool {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues("ServiceEntry", "sni_dnat_left_out")) == 1
	})
	st := h.stream(ingressIdentity)
	node := routerNode("gw", "ingress", "10.0.9.1", map[string]any{"istio": "eastwestgateway"}, nil)
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	db := false
	for _, a := range r.GetResources() {
		c := unmarshal[*clusterv3.Cluster](t, a, &clusterv3.Cluster{})
		switch c.GetName() {
		case "outbound_.6379_._.cache.internal.example":
			t.Fatalf("the router got %s, a LOGICAL_DNS cluster without a host", c.GetName())
		case "outbound_.5432_._.db.internal.example":
			db = c.GetType() == clusterv3.Cluster_LOGICAL_DNS && len(c.GetLoadAssignment().GetEndpoints()) == 1
		}
	}
	if !db {
		t.Fatal("the router has no LOGICAL_DNS SNI-DNAT cluster of db, whose endpoint accepts mTLS")
	}
}
