package envoygen

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
	"github.com/bulwark-mesh/bulwark/pkg/xds/scope"
)

// preparedSidecars are a namespace-wide Sidecar of app, one of app for
// the sleep workload, and the root namespace's default.
var preparedSidecars = sidecarDoc("app", "default", "", "  egress: [{hosts: [\"./*\", \"istio-system/*\"]}]\n") +
	sidecarDoc("app", "sleep", "app: sleep", "  egress: [{hosts: [\"./echo.app.svc.cluster.local\"]}]\n") +
	sidecarDoc("istio-system", "default", "", "  egress: [{hosts: [\"./*\"]}]\n")

// TestSidecarViewIsBuiltOncePerSnapshot: the proxies of one namespace
// that one Sidecar configures share one view within a snapshot, whatever
// generator generates for them, and proxyless clients share its
// services; another snapshot, Sidecar or namespace has its own.
func TestSidecarViewIsBuiltOncePerSnapshot(t *testing.T) {
	snap := modeltest.Load(t, scopeManifests+preparedSidecars)
	egressOf := func(g *Generator, snap *model.Snapshot, ns string, labels map[string]string) *egressScope {
		return (&builder{g: g, snap: snap, p: &Proxy{Namespace: ns, Labels: labels}}).egress()
	}
	g1, g2 := &Generator{TrustDomain: td}, &Generator{TrustDomain: td}
	a := egressOf(g1, snap, "app", map[string]string{"app": "echo"})
	if b := egressOf(g2, snap, "app", map[string]string{"app": "other"}); a != b {
		t.Error("two proxies under one Sidecar, generated for by two generators, have views of their own")
	}
	if a.key != snap.SidecarFor("app", map[string]string{"app": "echo"}).Key() {
		t.Errorf("app's view is %s's, not that of app's namespace-wide Sidecar", a.key)
	}
	v := scope.Shared(snap, snap.SidecarFor("app", nil), "app", routes.Options{})
	if len(v.Services) == 0 || &v.Services[0] != &a.services[0] {
		t.Error("proxyless clients and Envoy sidecars of one Sidecar do not share its view's services")
	}
	if sleep := egressOf(g1, snap, "app", map[string]string{"app": "sleep"}); sleep == a || len(sleep.services) != 1 {
		t.Errorf("the sleep workload's Sidecar gives it %d services through app's view: want its own view, of echo", len(sleep.services))
	}
	web, other := egressOf(g1, snap, "web", nil), egressOf(g1, snap, "other", nil)
	if web == other || web.key != other.key {
		t.Error("the root namespace's Sidecar gives two namespaces one view, or not its own each")
	}
	if again := egressOf(g1, modeltest.Load(t, scopeManifests+preparedSidecars), "app", nil); again == a {
		t.Error("another snapshot reuses the view of the last")
	}
	if o := egressOf(&Generator{TrustDomain: td, Mesh: Mesh{Routes: routes.Options{DefaultExportTo: []string{"."}}}}, snap, "app", nil); o == a {
		t.Error("a generator of another defaultVirtualServiceExportTo reuses the view of the mesh's default")
	}
}

// TestPrepareBuildsTheSharedViewsAndChangesNoResource: Prepare builds
// each Sidecar's view in its own namespace and the selector index, and
// what a proxy is sent from a prepared snapshot is what it is sent from
// one not prepared.
func TestPrepareBuildsTheSharedViewsAndChangesNoResource(t *testing.T) {
	manifests := scopeManifests + preparedSidecars
	prepared := modeltest.Load(t, manifests)
	(&Generator{TrustDomain: td}).Prepare(prepared)
	notBuilt := func(what string) func() *egressScope {
		return func() *egressScope { t.Errorf("Prepare left %s's view unbuilt", what); return &egressScope{} }
	}
	for _, sc := range prepared.Sidecars() {
		model.SharedValue(prepared, egressKey{sidecar: sc, ns: sc.Namespace}, notBuilt(sc.Name+"."+sc.Namespace))
	}
	model.SharedValue(prepared, selectorIndexKey{}, func() *selectorIndex {
		t.Error("Prepare left the selector index unbuilt")
		return newSelectorIndex(prepared)
	})
	fresh := modeltest.Load(t, manifests)
	for _, p := range []*Proxy{
		{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{sleepIP}},
		{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}},
		{Namespace: "web", Labels: map[string]string{"app": "other"}, IPs: []string{"10.0.1.5"}},
	} {
		for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
			got := resourceBytes(t, (&Generator{TrustDomain: td}).Generate(prepared, p, typeURL, nil, true))
			want := resourceBytes(t, (&Generator{TrustDomain: td}).Generate(fresh, p, typeURL, nil, true))
			if len(got) == 0 || len(got) != len(want) {
				t.Fatalf("%s of %s: %d resources prepared, %d not", typeURL, p.Labels["app"], len(got), len(want))
			}
			for name, raw := range want {
				if !bytes.Equal(got[name], raw) {
					t.Errorf("%s %s of %s differs when the snapshot was prepared", typeURL, name, p.Labels["app"])
				}
			}
		}
	}
}

func resourceBytes(t *testing.T, rs []resource.Resource) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, r := range rs {
		raw, err := r.Marshal()
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		out[strings.Clone(r.Name)] = raw
	}
	return out
}
