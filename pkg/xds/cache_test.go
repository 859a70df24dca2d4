package xds

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

func TestResponsesAreSharedOnlyBetweenProxiesAskingTheSame(t *testing.T) {
	store := model.NewStore()
	store.Publish(modeltest.Load(t, baseManifests+`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: other}
spec:
  host: echo.app.svc.cluster.local
  trafficPolicy: {tls: {mode: DISABLE}}
`))
	srv, err := New(Config{Model: store, Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		t.Fatal(err)
	}
	st := srv.state.Load()
	names := []string{echoCluster}
	get := func(w *identity.Workload, typeURL string, names []string) *response {
		k, gen := srv.mesh.Load().Scope(w, st.snap)
		key := sharedKey{typeURL: typeURL, proxy: k, names: namesKey(names)}
		return st.response(srv, gen, key, names)
	}
	a := testGen(t, srv, "grpc", "app", map[string]string{"app": "client", "v": "1"})
	sameAsA := testGen(t, srv, "grpc", "app", map[string]string{"v": "1", "app": "client"})
	otherLabels := testGen(t, srv, "grpc", "app", map[string]string{"app": "client", "v": "2"})
	otherRule := testGen(t, srv, "grpc", "other", map[string]string{"app": "client", "v": "1"})

	r := get(a, grpcgen.ClusterType, names)
	if len(r.resources) != 1 || r.version == "" {
		t.Fatalf("response: %d resources, version %q", len(r.resources), r.version)
	}
	if get(sameAsA, grpcgen.ClusterType, names) != r {
		t.Error("a proxy with the same namespace and labels did not share the response")
	}
	if get(otherLabels, grpcgen.ClusterType, names) != r {
		t.Error("a proxy of another scope was given a copy of an equal response")
	}
	if o := get(otherRule, grpcgen.ClusterType, names); o == r || o.version == r.version {
		t.Error("a proxy that another DestinationRule applies to shared the response")
	}
	if get(a, grpcgen.EndpointType, names) == r {
		t.Error("another type shared the response")
	}
}

func TestKeysAreUnambiguous(t *testing.T) {
	if namesKey([]string{"a\x00b"}) == namesKey([]string{"a", "b"}) || namesKey([]string{"1:a"}) == namesKey([]string{"a"}) {
		t.Error("two name lists share a key")
	}
	srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		t.Fatal(err)
	}
	snap := srv.state.Load().snap
	key := func(w *identity.Workload) string { k, _ := srv.mesh.Load().Scope(w, snap); return k }
	x := testGen(t, srv, "grpc", "ns", map[string]string{"a=b": "c"})
	y := testGen(t, srv, "grpc", "ns", map[string]string{"a": "b=c"})
	if key(x) == key(y) {
		t.Error("proxies with different labels share a key")
	}
	if e := testGen(t, srv, "", "ns", map[string]string{"a=b": "c"}); key(e) == key(x) {
		t.Error("an Envoy sidecar and a proxyless proxy share a key")
	}
}

// testGen is the workload of a sidecar~10.0.0.1 node with generator
// ("grpc" or "" for Envoy), namespace and labels.
func testGen(t *testing.T, _ *Server, generator, ns string, labels map[string]string) *identity.Workload {
	t.Helper()
	meta := &identity.NodeMeta{Namespace: ns, ServiceAccount: "sa", Labels: labels, Generator: generator}
	w, err := identity.WorkloadOf(&core.Node{Id: "sidecar~10.0.0.1~a-1." + ns + "~" + ns + ".svc.cluster.local"}, meta)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
