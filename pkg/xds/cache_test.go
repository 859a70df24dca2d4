package xds

import (
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

func TestResponsesAreSharedOnlyBetweenProxiesAskingTheSame(t *testing.T) {
	store := model.NewStore()
	store.Publish(modeltest.Load(t, baseManifests))
	srv, err := New(Config{Model: store, Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		t.Fatal(err)
	}
	st := srv.state.Load()
	names := []string{echoCluster}
	get := func(gp *grpcgen.Proxy, typeURL string, names []string) *response {
		key := sharedKey{typeURL: typeURL, proxy: proxyKey(gp), names: namesKey(names)}
		return st.response(srv, gp, key, names)
	}
	a := &grpcgen.Proxy{Namespace: "app", Labels: map[string]string{"app": "client", "v": "1"}}
	sameAsA := &grpcgen.Proxy{Namespace: "app", Labels: map[string]string{"v": "1", "app": "client"}}
	otherLabels := &grpcgen.Proxy{Namespace: "app", Labels: map[string]string{"app": "client", "v": "2"}}

	r := get(a, grpcgen.ClusterType, names)
	if len(r.resources) != 1 || r.version == "" {
		t.Fatalf("response: %d resources, version %q", len(r.resources), r.version)
	}
	if get(sameAsA, grpcgen.ClusterType, names) != r {
		t.Error("a proxy with the same namespace and labels did not share the response")
	}
	if get(otherLabels, grpcgen.ClusterType, names) == r {
		t.Error("a proxy with other labels shared the response")
	}
	if get(a, grpcgen.EndpointType, names) == r {
		t.Error("another type shared the response")
	}
}

func TestKeysAreUnambiguous(t *testing.T) {
	if namesKey([]string{"a\x00b"}) == namesKey([]string{"a", "b"}) || namesKey([]string{"1:a"}) == namesKey([]string{"a"}) {
		t.Error("two name lists share a key")
	}
	x := &grpcgen.Proxy{Namespace: "ns", Labels: map[string]string{"a=b": "c"}}
	y := &grpcgen.Proxy{Namespace: "ns", Labels: map[string]string{"a": "b=c"}}
	if proxyKey(x) == proxyKey(y) {
		t.Error("proxies with different labels share a key")
	}
}
