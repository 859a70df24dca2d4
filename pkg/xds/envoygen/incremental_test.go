package envoygen

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// marshalled is each resource's name, key and wire form.
func marshalled(t *testing.T, rs []resource.Resource) [][3]string {
	t.Helper()
	var out [][3]string
	for _, r := range rs {
		raw, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, [3]string{r.Name, r.Key, string(raw)})
	}
	return out
}

func TestNamedLoadAssignmentsAreTheListedOnes(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	g := &Generator{TrustDomain: td}
	for name, p := range map[string]*Proxy{
		"a client in the rule's namespace": {Namespace: "web", Labels: map[string]string{"app": "client"}, IPs: []string{"10.0.1.9"}},
		"a client elsewhere":               {Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}},
	} {
		t.Run(name, func(t *testing.T) {
			all := g.Generate(snap, p, resource.EndpointType, nil, true)
			if len(all) < 5 {
				t.Fatalf("only %d load assignments", len(all))
			}
			var names []string
			for _, r := range all {
				names = append(names, r.Name)
			}
			asked := append(slices.Clone(names), "outbound|80|nosuchsubset|other.web.svc.cluster.local",
				"outbound|81||echo.app.svc.cluster.local", "outbound|80||nosuch.app.svc.cluster.local", "inbound|80||", "outbound|80|", "outbound|x||a")
			named := g.Generate(snap, p, resource.EndpointType, asked, false)
			if got, want := marshalled(t, named), marshalled(t, all); !slices.Equal(got, want) {
				t.Errorf("by name:\n%v\nlisted:\n%v", got, want)
			}
			one := g.Generate(snap, p, resource.EndpointType, names[2:3], false)
			if len(one) != 1 || one[0].Name != names[2] {
				t.Errorf("asked for %s, got %v", names[2], one)
			}
		})
	}
}

func TestEndpointsReadElsewhere(t *testing.T) {
	g := &Generator{TrustDomain: td}
	base := modeltest.Load(t, manifests)
	moved := modeltest.Load(t, replace(t, manifests, "address: 10.0.0.5", "address: 10.0.0.7"))
	otherAccount := modeltest.Load(t, replace(t, manifests, "serviceAccount: legacy", "serviceAccount: echo"))
	if d := model.Diff(base, moved); d.Config || !d.Endpoints["echo.app.svc.cluster.local"] {
		t.Fatalf("moving an endpoint: %+v", d)
	}
	if g.EndpointsReadElsewhere(base, moved, "echo.app.svc.cluster.local") {
		t.Error("an endpoint that moved is read outside load assignments")
	}
	if !g.EndpointsReadElsewhere(base, otherAccount, "echo.app.svc.cluster.local") {
		t.Error("a service account gone from the service is not read by its clusters")
	}
	headless := replace(t, manifests, "clusterIP: 10.96.0.10", "clusterIP: None")
	if !g.EndpointsReadElsewhere(modeltest.Load(t, headless), modeltest.Load(t, replace(t, headless, "address: 10.0.0.5", "address: 10.0.0.7")), "echo.app.svc.cluster.local") {
		t.Error("a headless service's endpoints are not read by its listeners")
	}
}

// replace is strings.Replace of one occurrence that must be there.
func replace(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("%q not found", old)
	}
	return strings.Replace(s, old, new, 1)
}

// TestEndpointScopeIsWhatLoadAssignmentsRead: proxies of one endpoint
// scope get equal load assignments, whatever their labels and addresses,
// unless a DestinationRule selects clients by labels: then the labels
// are in the scope, and the load assignments do differ.
func TestEndpointScopeIsWhatLoadAssignmentsRead(t *testing.T) {
	g := &Generator{TrustDomain: td}
	sleep := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.9"}}
	other := &Proxy{Namespace: "app", Labels: map[string]string{"app": "other"}, IPs: []string{"10.0.0.10"}}
	elsewhere := &Proxy{Namespace: "other", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.11"}}
	subsets := "  subsets: [{name: v1, labels: {app: echo}}]\n  trafficPolicy: {tls: {mode: DISABLE}}\n"
	for name, tc := range map[string]struct {
		manifests string
		shared    bool // sleep and other share an endpoint scope
	}{
		"no rule":                           {manifests, true},
		"a rule for every client":           {originationRule("app", subsets), true},
		"a rule for clients labelled sleep": {originationRule("app", "  workloadSelector: {matchLabels: {app: sleep}}\n"+subsets), false},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, tc.manifests)
			if got := g.EndpointScope(snap, sleep) == g.EndpointScope(snap, other); got != tc.shared {
				t.Fatalf("shared %v, want %v", got, tc.shared)
			}
			if g.EndpointScope(snap, sleep) == g.EndpointScope(snap, elsewhere) {
				t.Fatal("proxies of two namespaces share an endpoint scope")
			}
			a, b := generate(t, g, snap, sleep).endpoints, generate(t, g, snap, other).endpoints
			equal := len(a) == len(b)
			for n, cla := range a {
				equal = equal && proto.Equal(cla, b[n])
			}
			if tc.shared && !equal {
				t.Error("proxies of one endpoint scope got different load assignments")
			}
			if !tc.shared && equal {
				t.Error("the labels the rule selects by changed no load assignment: the case tests nothing")
			}
		})
	}
}
