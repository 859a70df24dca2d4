package envoygen

import (
	"maps"
	"slices"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// TestProxiesOfDifferentNetworkViewsShareNoLoadAssignment: a view
// (REQUESTED_NETWORK_VIEW) is part of the load assignment's key and of
// both scopes, so two proxies alike but for their views never share one;
// proxies without a view share theirs as before. What each view is sent
// is compared with Istio's generator in test/interop
// (TestRequestedNetworkViewMatchesIstio).
func TestProxiesOfDifferentNetworkViewsShareNoLoadAssignment(t *testing.T) {
	snap, nets := multiNetworkSnapshot(t)
	g := &Generator{TrustDomain: td, Mesh: Mesh{Networks: nets}}
	const name = "outbound|80||echo.app.svc.cluster.local"
	views := map[string][]string{
		"no view":           nil,
		"its own network":   {"net1"},
		"the other one":     {"net2"},
		"both":              {"net1", "net2"},
		"only no network's": {},
	}
	keys, scopes, endpointScopes := map[string]string{}, map[string]string{}, map[string]string{}
	got := map[string][]string{}
	for _, vname := range slices.Sorted(maps.Keys(views)) {
		p := &Proxy{Namespace: "app", Network: "net1", NetworkView: views[vname]}
		rs := g.Generate(snap, p, resource.EndpointType, []string{name}, false)
		if len(rs) != 1 {
			t.Fatalf("%s: %d load assignments", vname, len(rs))
		}
		for _, c := range []struct {
			seen map[string]string
			key  string
		}{{keys, rs[0].Key}, {scopes, g.Scope(snap, p)}, {endpointScopes, g.EndpointScope(snap, p)}} {
			if other, ok := c.seen[c.key]; ok {
				t.Errorf("%s shares %q with %s", vname, c.key, other)
			}
			c.seen[c.key] = vname
		}
		got[vname], _ = weighted(generate(t, g, snap, p).endpoints[name])
	}
	if !slices.Equal(got["no view"], got["both"]) {
		t.Errorf("a view of every network with endpoints %v, without a view %v", got["both"], got["no view"])
	}
	if slices.Equal(got["its own network"], got["the other one"]) || slices.Equal(got["its own network"], got["no view"]) {
		t.Errorf("views change nothing: %v", got)
	}
	same := &Proxy{Namespace: "app", Network: "net1", NetworkView: []string{"net2"}}
	if rs := g.Generate(snap, same, resource.EndpointType, []string{name}, false); keys[rs[0].Key] != "the other one" {
		t.Errorf("two proxies of one view share no load assignment: key %q", rs[0].Key)
	}
}
