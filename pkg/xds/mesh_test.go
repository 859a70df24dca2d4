package xds

import (
	"context"
	"fmt"
	"google.golang.org/protobuf/encoding/prototext"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// meshFile runs a real mesh configuration watcher on a file of its own and
// returns it with a function that rewrites the file.
func meshFile(t *testing.T, initial string) (*meshconfig.Watcher, func(string)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mesh")
	write := func(doc string) {
		t.Helper()
		// Written beside and renamed over, so the watcher never reads half a file.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(initial)
	defaults := meshconfig.Defaults{TrustDomain: "cluster.local", RootNamespace: "istio-system"}
	first, _, err := meshconfig.ReadFile(path, defaults)
	if err != nil {
		t.Fatal(err)
	}
	w, err := meshconfig.NewWatcher(meshconfig.WatcherConfig{Path: path, Defaults: defaults, Initial: first, Resync: time.Hour, Logger: catest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, write
}

// ack acknowledges r on the stream.
func ack(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, r *discovery.DiscoveryResponse) {
	t.Helper()
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
}

// outboundFallback is the cluster virtualOutbound's catch-all chain sends
// unknown destinations to.
func outboundFallback(t *testing.T, r *discovery.DiscoveryResponse) string {
	t.Helper()
	for _, a := range r.GetResources() {
		l := unmarshal[*listener.Listener](t, a, &listener.Listener{})
		if l.GetName() != "virtualOutbound" {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			if fc.GetName() == "virtualOutbound-catchall-tcp" {
				return unmarshal[*tcpproxy.TcpProxy](t, fc.GetFilters()[len(fc.GetFilters())-1].GetTypedConfig(), &tcpproxy.TcpProxy{}).GetCluster()
			}
		}
	}
	t.Fatal("no virtualOutbound catch-all chain")
	return ""
}

// autoMTLS reports whether echo's outbound cluster offers Istio mTLS to
// endpoints that accept it.
func autoMTLS(t *testing.T, r *discovery.DiscoveryResponse) bool {
	t.Helper()
	for _, a := range r.GetResources() {
		c := unmarshal[*cluster.Cluster](t, a, &cluster.Cluster{})
		if c.GetName() == "outbound|8080||echo.app.svc.cluster.local" {
			return len(c.GetTransportSocketMatches()) > 0
		}
	}
	t.Fatal("no outbound cluster for echo")
	return false
}

// TestMeshConfigChangeReachesAConnectedSidecar: an Envoy sidecar connected
// over ADS gets new clusters and listeners when the mesh configuration
// file changes, in Envoy's order, without reconnecting; a bad update
// pushes nothing; the next good one does.
func TestMeshConfigChangeReachesAConnectedSidecar(t *testing.T) {
	watcher, write := meshFile(t, "outboundTrafficPolicy: {mode: ALLOW_ANY}\n")
	h := newHarness(t, modeltest.Load(t, envoyManifests), func(c *Config) { c.Mesh = watcher })
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	cds := recv(t, st)
	ack(t, st, cds)
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	lds := recv(t, st)
	ack(t, st, lds)
	if got := outboundFallback(t, lds); got != "PassthroughCluster" {
		t.Fatalf("under ALLOW_ANY unknown destinations go to %s, want PassthroughCluster", got)
	}
	if !autoMTLS(t, cds) {
		t.Fatal("auto-mTLS is off by default")
	}

	write("outboundTrafficPolicy: {mode: REGISTRY_ONLY}\nenableAutoMtls: false\n")
	cds = recv(t, st)
	if cds.GetTypeUrl() != resource.ClusterType || autoMTLS(t, cds) {
		t.Fatalf("first push: %s with auto-mTLS %v, want clusters without auto-mTLS first", cds.GetTypeUrl(), cds.GetTypeUrl() == resource.ClusterType && autoMTLS(t, cds))
	}
	ack(t, st, cds)
	lds = recv(t, st)
	if lds.GetTypeUrl() != resource.ListenerType {
		t.Fatalf("second push: %s, want listeners", lds.GetTypeUrl())
	}
	if got := outboundFallback(t, lds); got != "BlackHoleCluster" {
		t.Fatalf("under REGISTRY_ONLY unknown destinations go to %s, want BlackHoleCluster", got)
	}
	ack(t, st, lds)

	write("outboundTrafficPolicy: [not yaml\n")
	noResponse(t, st, resource.RouteType)
	if h.srv.state.Load().mesh.Config.GetOutboundTrafficPolicy().GetMode() != meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY {
		t.Fatal("a bad update changed the mesh configuration served")
	}

	write("enableAutoMtls: false\n") // back to ALLOW_ANY, Istio's default
	lds = recv(t, st)
	if lds.GetTypeUrl() != resource.ListenerType || outboundFallback(t, lds) != "PassthroughCluster" {
		t.Fatalf("after recovery: %s, want listeners sending unknown destinations to PassthroughCluster", lds.GetTypeUrl())
	}
}

// TestMeshConfigRootNamespaceMakesItsPoliciesMeshWide: an
// AuthorizationPolicy of the namespace the mesh configuration names as
// root applies to every workload, and stops applying when the root moves.
func TestMeshConfigRootNamespaceMakesItsPoliciesMeshWide(t *testing.T) {
	watcher, write := meshFile(t, "")
	snap := modeltest.Load(t, envoyManifests+`---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-app, namespace: mesh-root}
spec: {rules: [{from: [{source: {namespaces: [app]}}]}]}
`)
	h := newHarness(t, snap, func(c *Config) { c.Mesh = watcher })
	st := h.stream("spiffe://cluster.local/ns/app/sa/web")
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "web", "10.0.0.20"), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if inboundRBAC(t, r) {
		t.Fatal("a policy of mesh-root applies while the root namespace is istio-system")
	}
	ack(t, st, r)

	write("rootNamespace: mesh-root\n")
	r = recv(t, st)
	if !inboundRBAC(t, r) {
		t.Fatal("with root namespace mesh-root, its policy does not reach web's inbound chains")
	}
	ack(t, st, r)
	if v := h.srv.state.Load().snap.Version; v == snap.Version {
		t.Errorf("served snapshot version %q is the model's: a root namespace change must be told apart", v)
	}

	write("rootNamespace: istio-system\n")
	if r = recv(t, st); inboundRBAC(t, r) {
		t.Fatal("the policy still applies after the root namespace moved back")
	}
}

// inboundRBAC reports whether every inbound chain of virtualInbound but
// the loop blackhole has an RBAC filter.
func inboundRBAC(t *testing.T, r *discovery.DiscoveryResponse) bool {
	t.Helper()
	for _, a := range r.GetResources() {
		l := unmarshal[*listener.Listener](t, a, &listener.Listener{})
		if l.GetName() != "virtualInbound" {
			continue
		}
		all, n := true, 0
		for _, fc := range l.GetFilterChains() {
			if fc.GetName() == "virtualInbound-blackhole" {
				continue
			}
			n++
			all = all && chainHasRBAC(t, fc)
		}
		return n > 0 && all
	}
	t.Fatal("no virtualInbound")
	return false
}

// TestMeshConfigAliasesReachInboundRBAC: trust domain aliases added to the
// mesh configuration widen a connected sidecar's RBAC principals to them.
func TestMeshConfigAliasesReachInboundRBAC(t *testing.T) {
	watcher, write := meshFile(t, "")
	snap := modeltest.Load(t, envoyManifests+`---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-client, namespace: app}
spec: {rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/client]}}]}]}
`)
	h := newHarness(t, snap, func(c *Config) { c.Mesh = watcher })
	st := h.stream("spiffe://cluster.local/ns/app/sa/web")
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "web", "10.0.0.20"), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	const alias = "spiffe://old.td/ns/app/sa/client"
	r := recv(t, st)
	if !inboundRBAC(t, r) || strings.Contains(prototext.Format(r), alias) {
		t.Fatal("without aliases the policy must apply to the mesh's trust domain only")
	}
	ack(t, st, r)
	write("trustDomainAliases: [old.td]\n")
	if r = recv(t, st); !strings.Contains(prototext.Format(r), alias) {
		t.Fatal("the alias's identity is not in the pushed RBAC")
	}
}

// TestMeshConfigRetryPolicyReachesRoutes: the mesh's
// defaultHttpRetryPolicy replaces Istio's default retries on a connected
// sidecar's default routes, and attempts 0 removes them.
func TestMeshConfigRetryPolicyReachesRoutes(t *testing.T) {
	watcher, write := meshFile(t, "")
	h := newHarness(t, modeltest.Load(t, envoyManifests), func(c *Config) { c.Mesh = watcher })
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.RouteType, ResourceNames: []string{"80"}}); err != nil {
		t.Fatal(err)
	}
	retries := func(r *discovery.DiscoveryResponse) []string {
		t.Helper()
		var out []string
		for _, a := range r.GetResources() {
			rc := &routev3.RouteConfiguration{}
			if err := a.UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			for _, vh := range rc.GetVirtualHosts() {
				if vh.GetName() == "web.app.svc.cluster.local:80" {
					p := vh.GetRoutes()[0].GetRoute().GetRetryPolicy()
					out = append(out, fmt.Sprintf("%d %s", p.GetNumRetries().GetValue(), p.GetRetryOn()))
				}
			}
		}
		return out
	}
	ackRDS := func(r *discovery.DiscoveryResponse) {
		t.Helper()
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResourceNames: []string{"80"}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	r := recv(t, st)
	if got := retries(r); !slices.Equal(got, []string{"2 connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"}) {
		t.Fatalf("default retries %q, want Istio's", got)
	}
	ackRDS(r)
	write("defaultHttpRetryPolicy: {attempts: 4, retryOn: 5xx}\n")
	if r = recv(t, st); !slices.Equal(retries(r), []string{"4 5xx"}) {
		t.Fatalf("after the mesh's policy: %q (%s, %d resources)", retries(r), r.GetTypeUrl(), len(r.GetResources()))
	}
	ackRDS(r)
	write("defaultHttpRetryPolicy: {attempts: 0}\n")
	if r = recv(t, st); !slices.Equal(retries(r), []string{"0 "}) {
		t.Fatalf("after retries turned off: %q", retries(r))
	}
}
