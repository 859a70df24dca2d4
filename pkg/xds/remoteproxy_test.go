package xds

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// withRemotePods is base with the pods of remote clusters, each list
// sorted by namespace and name.
func withRemotePods(base *model.Snapshot, remote map[string][]*model.Pod) *model.Snapshot {
	return withPods(base, base.Resources().Pods, remote)
}

// withPods is base with local pods and those of remote clusters.
func withPods(base *model.Snapshot, local []*model.Pod, remote map[string][]*model.Pod) *model.Snapshot {
	res := *base.Resources()
	res.Pods, res.RemotePods = local, remote
	v := base.Version + "+pods"
	for _, p := range local {
		v += "/" + p.Name + ":" + fmt.Sprint(p.ServiceAccount, p.Labels)
	}
	for _, id := range slices.Sorted(maps.Keys(remote)) {
		for _, p := range remote[id] {
			v += "/" + id + "." + p.Name + ":" + fmt.Sprint(p.ServiceAccount, p.Labels)
		}
	}
	return model.BuildShared(v, base.Options, res, nil)
}

func pod(name, sa, app, ip string) *model.Pod {
	return &model.Pod{Meta: model.Meta{Name: name, Namespace: "app"}, ServiceAccount: sa, Labels: map[string]string{"app": app}, IPs: []string{ip}}
}

// clusterStream opens an ADS stream as identity id, authenticated by
// cluster ("": a client certificate).
func (h *harness) clusterStream(id, cluster string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-id", id)
	if cluster != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-cluster", cluster)
	}
	st, err := discovery.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// connectAs sends node's first request (echo's listener, proxyless) on a
// stream that cluster authenticated (clusterAuth), and fails the test
// unless the answer's code is want. It returns the proxy connected, nil
// when want is not OK.
func (h *harness) connectAs(node *core.Node, cluster string, want codes.Code) *proxy {
	h.t.Helper()
	st := h.clusterStream(clientID, cluster)
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
		h.t.Fatal(err)
	}
	_, err := st.Recv()
	if got := grpcstatus.Code(err); got != want {
		h.t.Fatalf("got %v (%v), want %v", got, err, want)
	}
	if want != codes.OK {
		return nil
	}
	return h.connected()
}

// connected is the one proxy connected to h's server.
func (h *harness) connected() *proxy {
	h.t.Helper()
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	var out []*proxy
	for _, p := range h.srv.byNode {
		out = append(out, p)
	}
	if len(out) != 1 {
		h.t.Fatalf("%d proxies connected, want 1", len(out))
	}
	return out[0]
}

// TestARemoteClustersProxyIsItsClustersPod: a proxy is the pod its node
// ID names in the registry of the cluster that authenticated it, never a
// pod of the same name in another cluster; its workload is labelled with
// that cluster, whatever it claims; its Secrets are that cluster's.
func TestARemoteClustersProxyIsItsClustersPod(t *testing.T) {
	const local = "cluster-a"
	snap := withPods(modeltest.Load(t, baseManifests),
		[]*model.Pod{pod("app-1", "client", "local-client", "10.0.0.1"), pod("only-local", "client", "local-only", "10.0.0.2")},
		map[string][]*model.Pod{"cluster-b": {pod("app-1", "client", "remote-client", "10.1.0.1"), pod("other-sa", "other", "remote-other", "10.1.0.2")}})
	claimed := map[string]any{"app": "claimed", model.ClusterLabel: local}
	tests := map[string]struct {
		authenticatedBy string // "": a client certificate
		pod             string
		code            codes.Code
		labels          map[string]string // of the workload served
		secretsCluster  string
	}{
		"a local token is the local pod": {
			authenticatedBy: local, pod: "app-1",
			labels: map[string]string{"app": "local-client", model.ClusterLabel: local}},
		"a client certificate is the local pod": {
			pod:    "app-1",
			labels: map[string]string{"app": "local-client", model.ClusterLabel: local}},
		"a token of cluster-b is cluster-b's pod of that name": {
			authenticatedBy: "cluster-b", pod: "app-1", secretsCluster: "cluster-b",
			labels: map[string]string{"app": "remote-client", model.ClusterLabel: "cluster-b"}},
		// Istio would look the pod up in the cluster CLUSTER_ID names.
		"a token of cluster-b naming a pod only the local cluster has is never served the local pod": {
			authenticatedBy: "cluster-b", pod: "only-local", secretsCluster: "cluster-b",
			labels: map[string]string{"app": "claimed", model.ClusterLabel: "cluster-b"}},
		"a token of cluster-b naming cluster-b's pod of another service account is refused": {
			authenticatedBy: "cluster-b", pod: "other-sa", code: codes.PermissionDenied},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, snap, func(c *Config) { c.Authenticator, c.ClusterID = clusterAuth{}, local })
			node := testNode("app", "client", claimed)
			node.Id = "sidecar~10.9.9.9~" + tc.pod + ".app~app.svc.cluster.local"
			p := h.connectAs(node, tc.authenticatedBy, tc.code)
			if p == nil {
				return
			}
			p.mu.Lock()
			labels, sp := p.wl.LabelsIn(h.srv.state.Load().snap), p.sp
			p.mu.Unlock()
			if !maps.Equal(labels, tc.labels) {
				t.Errorf("workload labels %v, want %v", labels, tc.labels)
			}
			if sp.Cluster != tc.secretsCluster {
				t.Errorf("secrets of cluster %q, want %q", sp.Cluster, tc.secretsCluster)
			}
		})
	}
}

// TestAClusterAliasInNodeMetadataIsTheAliasedCluster: node metadata
// CLUSTER_ID naming an alias (Istio's --clusterAliases) names the cluster
// it stands for, and binds the proxy only when that is the cluster that
// authenticated it.
func TestAClusterAliasInNodeMetadataIsTheAliasedCluster(t *testing.T) {
	const local = "cluster-a"
	snap := withPods(modeltest.Load(t, baseManifests), []*model.Pod{pod("app-1", "client", "local-client", "10.0.0.1")},
		map[string][]*model.Pod{"cluster-b": {pod("app-1", "client", "remote-client", "10.1.0.1")}})
	tests := map[string]struct {
		authenticatedBy, claimed string
		code                     codes.Code
		app                      string // of the workload served
	}{
		"a token of cluster-b claiming its alias is cluster-b's pod": {
			authenticatedBy: "cluster-b", claimed: "old-b", app: "remote-client"},
		"a local token claiming the local cluster's alias is the local pod": {
			authenticatedBy: local, claimed: "old-a", app: "local-client"},
		"a client certificate claiming the local cluster's alias is the local pod": {
			claimed: "old-a", app: "local-client"},
		"a local token claiming cluster-b's alias is refused": {
			authenticatedBy: local, claimed: "old-b", code: codes.PermissionDenied},
		"a token of cluster-b claiming the local cluster's alias is refused": {
			authenticatedBy: "cluster-b", claimed: "old-a", code: codes.PermissionDenied},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, snap, func(c *Config) {
				c.Authenticator, c.ClusterID = clusterAuth{}, local
				c.ClusterAliases = authn.ClusterAliases{"old-a": local, "old-b": "cluster-b"}
			})
			node := testNode("app", "client", nil)
			node.Id = "sidecar~10.9.9.9~app-1.app~app.svc.cluster.local"
			node.Metadata.Fields["CLUSTER_ID"] = structpb.NewStringValue(tc.claimed)
			p := h.connectAs(node, tc.authenticatedBy, tc.code)
			if p == nil {
				return
			}
			p.mu.Lock()
			labels := p.wl.LabelsIn(h.srv.state.Load().snap)
			p.mu.Unlock()
			if labels["app"] != tc.app {
				t.Errorf("workload labels %v, want app %s", labels, tc.app)
			}
		})
	}
}

// scopedSidecar scopes the workloads labelled app: scoped to web.
const scopedSidecar = `---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: scoped, namespace: app}
spec:
  workloadSelector: {labels: {app: scoped}}
  egress: [{hosts: ["./web.app.svc.cluster.local"]}]
`

// TestARemotePodChangeReconfiguresItsProxyAlone: Envoy sidecars of
// cluster-a and cluster-b, of pods of one name, each follow their own
// pod: a Sidecar selecting a pod's new labels scopes that pod's proxy,
// and not the other cluster's.
func TestARemotePodChangeReconfiguresItsProxyAlone(t *testing.T) {
	base := modeltest.Load(t, envoyManifests+scopedSidecar)
	localPod := func(app string) []*model.Pod { return []*model.Pod{pod("client-1", "client", app, "10.0.0.9")} }
	remotePod := func(app string) map[string][]*model.Pod {
		return map[string][]*model.Pod{"cluster-b": {pod("client-1", "client", app, "10.0.0.9")}}
	}
	h := newHarness(t, withPods(base, localPod("client"), remotePod("client")),
		func(c *Config) { c.Authenticator, c.ClusterID = clusterAuth{}, "cluster-a" })
	open := func(cluster string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		st := h.clusterStream(clientID, cluster)
		node := envoyNode("app", "client", "10.0.0.9")
		node.Metadata.Fields["CLUSTER_ID"] = structpb.NewStringValue(cluster)
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		r := recv(t, st)
		ack(t, st, r)
		if got := clustersOf(t, r); !slices.Contains(got, "outbound|8080||echo.app.svc.cluster.local") {
			t.Fatalf("unscoped, the sidecar of %s sees %q", cluster, got)
		}
		return st
	}
	localSt, remoteSt := open("cluster-a"), open("cluster-b")
	scoped := []string{"outbound|5432||web.app.svc.cluster.local", "outbound|80||web.app.svc.cluster.local"}
	scopedNow := func(st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, who string) {
		t.Helper()
		r := recv(t, st)
		if got := clustersOf(t, r); r.GetTypeUrl() != resource.ClusterType || !slices.Equal(got, scoped) {
			t.Fatalf("after its pod's change the sidecar of %s got %s %q, want clusters %q", who, r.GetTypeUrl(), got, scoped)
		}
		ack(t, st, r)
	}

	h.store.Publish(withPods(base, localPod("scoped"), remotePod("client")))
	scopedNow(localSt, "cluster-a")
	noResponse(t, remoteSt, resource.EndpointType)

	// The local namesake unchanged and another local pod started, so that
	// the change is one of pods alone: the remote pod must be among them.
	started := append(localPod("scoped"), pod("started-1", "started", "started", "10.0.0.10"))
	h.store.Publish(withPods(base, started, remotePod("scoped")))
	scopedNow(remoteSt, "cluster-b")
}
