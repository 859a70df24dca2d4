package model

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
)

func sidecar(ns, name string, created int, selector map[string]string, hosts ...string) *Sidecar {
	spec := &networkingv1.Sidecar{Egress: []*networkingv1.IstioEgressListener{{Hosts: hosts}}}
	if selector != nil {
		spec.WorkloadSelector = &networkingv1.WorkloadSelector{Labels: selector}
	}
	return &Sidecar{Meta: Meta{Name: name, Namespace: ns}, Created: time.Unix(int64(created), 0), Spec: spec}
}

func TestSidecarForChoosesAsIstio(t *testing.T) {
	all := []*Sidecar{
		sidecar("istio-system", "default", 5, nil, "./*", "istio-system/*"),
		sidecar("istio-system", "older-root", 1, nil, "*/*"),
		sidecar("istio-system", "root-selected", 0, map[string]string{"app": "x"}, "*/*"),
		sidecar("a", "ns-wide-new", 9, nil, "./*"),
		sidecar("a", "ns-wide-old", 2, nil, "./*"),
		sidecar("a", "web-new", 8, map[string]string{"app": "web"}, "./*"),
		sidecar("a", "web-old", 3, map[string]string{"app": "web"}, "./*"),
		sidecar("a", "everyone", 7, map[string]string{}, "./*"),
		sidecar("b", "db-only", 1, map[string]string{"app": "db"}, "./*"),
	}
	snap := Build("v", Options{}, Resources{Sidecars: all})
	cases := map[string]struct {
		ns     string
		labels map[string]string
		want   string
	}{
		"a selector matching wins, the oldest of those that match":          {"a", map[string]string{"app": "web"}, "a/web-old"},
		"an empty selector selects every workload before namespace-wide":    {"a", map[string]string{"app": "api"}, "a/everyone"},
		"a namespace whose selected Sidecars miss falls to the root's":      {"b", map[string]string{"app": "web"}, "istio-system/older-root"},
		"a namespace without Sidecars gets the root's oldest unselected":    {"c", nil, "istio-system/older-root"},
		"the root namespace's own workloads get a matching selected one":    {"istio-system", map[string]string{"app": "x"}, "istio-system/root-selected"},
		"the root namespace's other workloads get its oldest unselected":    {"istio-system", nil, "istio-system/older-root"},
		"a selected Sidecar of the namespace applies to its workloads only": {"b", map[string]string{"app": "db"}, "b/db-only"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := snap.SidecarFor(c.ns, c.labels)
			if got == nil || got.Namespace+"/"+got.Name != c.want {
				t.Fatalf("SidecarFor(%s, %v) = %v, want %s", c.ns, c.labels, got, c.want)
			}
		})
	}
	t.Run("without Sidecars in the namespace nor the root's, none", func(t *testing.T) {
		snap := Build("v", Options{}, Resources{Sidecars: all[3:]})
		if got := snap.SidecarFor("c", nil); got != nil {
			t.Fatalf("got %s/%s", got.Namespace, got.Name)
		}
	})
	t.Run("another root namespace chooses another root Sidecar", func(t *testing.T) {
		if got := snap.WithRootNamespace("a").SidecarFor("c", nil); got == nil || got.Name != "ns-wide-old" {
			t.Fatalf("got %v", got)
		}
	})
}

func TestEgressHostsImportAsIstio(t *testing.T) {
	svc := func(ns, host string) *Service { return &Service{Meta: Meta{Name: "s", Namespace: ns}, Hostname: host} }
	cases := map[string]struct {
		hosts []string
		svc   *Service
		want  bool
	}{
		"./* is the proxy's namespace":                {[]string{"./*"}, svc("app", "a.app.svc.cluster.local"), true},
		"./* is not another namespace":                {[]string{"./*"}, svc("other", "b.other.svc.cluster.local"), false},
		"ns/* names that namespace":                   {[]string{"other/*"}, svc("other", "b.other.svc.cluster.local"), true},
		"*/host names the host in any namespace":      {[]string{"*/b.other.svc.cluster.local"}, svc("other", "b.other.svc.cluster.local"), true},
		"ns/host of another namespace does not":       {[]string{"app/b.other.svc.cluster.local"}, svc("other", "b.other.svc.cluster.local"), false},
		"a wildcard host covers its subdomains":       {[]string{"*/*.example.com"}, svc("ext", "api.example.com"), true},
		"a wildcard host does not cover its own apex": {[]string{"*/*.example.com"}, svc("ext", "example.com"), false},
		"a wildcard service within a wildcard import": {[]string{"*/*.example.com"}, svc("ext", "*.api.example.com"), true},
		"a wildcard service wider than the import":    {[]string{"*/*.api.example.com"}, svc("ext", "*.example.com"), false},
		"~/host excludes it from */*":                 {[]string{"*/*", "~/b.other.svc.cluster.local"}, svc("other", "b.other.svc.cluster.local"), false},
		"~ns/* excludes that namespace's hosts":       {[]string{"*/*", "~other/*"}, svc("other", "b.other.svc.cluster.local"), false},
		"~ns/* leaves other namespaces":               {[]string{"*/*", "~other/*"}, svc("app", "a.app.svc.cluster.local"), true},
		"a host without a namespace is ignored":       {[]string{"a.app.svc.cluster.local"}, svc("app", "a.app.svc.cluster.local"), false},
		"a host with two slashes is ignored":          {[]string{"app/x/a.app.svc.cluster.local"}, svc("app", "a.app.svc.cluster.local"), false},
		"an exact host matches exactly, case and all": {[]string{"app/A.app.svc.cluster.local"}, svc("app", "a.app.svc.cluster.local"), false},
		"*/* is everything":                           {[]string{"*/*"}, svc("x", "y.x.svc.cluster.local"), true},
		"istio-system/* is the control plane's hosts": {[]string{"./*", "istio-system/*"}, svc("istio-system", "istiod.istio-system.svc.cluster.local"), true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ParseEgressHosts(c.hosts, "app").ImportsService(c.svc); got != c.want {
				t.Fatalf("%v imports %s/%s: %t, want %t", c.hosts, c.svc.Namespace, c.svc.Hostname, got, c.want)
			}
		})
	}
}

func TestEgressHostsImportVirtualServicesAsIstio(t *testing.T) {
	cases := map[string]struct {
		hosts []string
		vsNS  string
		vs    []string
		want  bool
	}{
		"by the VirtualService's namespace, not its hosts'":   {[]string{"./*"}, "app", []string{"b.other.svc.cluster.local"}, true},
		"not of another namespace":                            {[]string{"./*"}, "other", []string{"a.app.svc.cluster.local"}, false},
		"a wildcard VirtualService host matches an exact one": {[]string{"*/api.example.com"}, "ext", []string{"*.example.com"}, true},
		"an excluded host does not select it":                 {[]string{"*/*", "~/api.example.com"}, "ext", []string{"api.example.com"}, false},
		"another of its hosts still does":                     {[]string{"*/*", "~/api.example.com"}, "ext", []string{"api.example.com", "web.example.com"}, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ParseEgressHosts(c.hosts, "app").ImportsVirtualService(c.vsNS, c.vs); got != c.want {
				t.Fatalf("%v imports %s %v: %t, want %t", c.hosts, c.vsNS, c.vs, got, c.want)
			}
		})
	}
}

func TestDiffTellsSidecarChanges(t *testing.T) {
	a := sidecar("a", "s", 1, nil, "./*")
	changed := sidecar("a", "s", 1, nil, "*/*")
	other := sidecar("b", "s", 1, nil, "./*")
	old := Build("1", Options{}, Resources{Sidecars: []*Sidecar{a, other}})
	next := Build("2", Options{}, Resources{Sidecars: []*Sidecar{changed, other}})
	d := Diff(old, next)
	if d.Config || len(d.Sidecars) != 2 || d.Sidecars[0] != a || d.Sidecars[1] != changed {
		t.Fatalf("diff %+v: want the Sidecar before and after, and no config change", d)
	}
	if d.None() {
		t.Fatal("a Sidecar change is a change")
	}
	if d := Diff(old, Build("3", Options{}, Resources{Sidecars: []*Sidecar{a, other}})); !d.None() {
		t.Fatalf("equal Sidecars: %+v", d)
	}
}

// TestFileSidecars: a Sidecar of the file model keeps its creation time,
// which chooses among several of a namespace.
func TestFileSidecars(t *testing.T) {
	dir := t.TempDir()
	docs := `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: newer, namespace: app, creationTimestamp: "2026-03-01T00:00:00Z"}
spec:
  egress: [{hosts: ["*/*"]}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: older, namespace: app, creationTimestamp: "2026-02-01T00:00:00Z"}
spec:
  egress: [{hosts: ["./*", "istio-system/*"]}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
`
	if err := os.WriteFile(filepath.Join(dir, "sidecars.yaml"), []byte(docs), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := LoadDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sc := snap.SidecarFor("app", nil)
	if sc == nil || sc.Name != "older" {
		t.Fatalf("SidecarFor(app) = %+v, want the older", sc)
	}
	if only, set := sc.RegistryOnly(); !only || !set {
		t.Errorf("outboundTrafficPolicy: registry only %t, set %t", only, set)
	}
}

// TestSidecarHostsPastTheBoundAreNotRead: of a Sidecar with more egress
// hosts than MaxSidecarHosts (one the webhook did not see), only the
// first are read, so that it imports less, never more.
func TestSidecarHostsPastTheBoundAreNotRead(t *testing.T) {
	hosts := make([]string, MaxSidecarHosts+10)
	for i := range hosts {
		hosts[i] = "ns" + strconv.Itoa(i) + "/*"
	}
	sc := sidecar("app", "many", 0, nil, hosts[:MaxSidecarHosts-5]...)
	sc.Spec.Egress = append(sc.Spec.Egress, &networkingv1.IstioEgressListener{Hosts: hosts[MaxSidecarHosts-5:]})
	if !sc.OverLimit() {
		t.Fatal("not over the limit")
	}
	read := 0
	for _, l := range sc.EgressListeners() {
		read += len(l.GetHosts())
	}
	if read != MaxSidecarHosts || len(sc.Spec.Egress[1].Hosts) != 15 {
		t.Fatalf("%d hosts read (the spec's second listener now has %d): want %d, the spec untouched", read, len(sc.Spec.Egress[1].Hosts), MaxSidecarHosts)
	}
	last := &Service{Meta: Meta{Namespace: "ns" + strconv.Itoa(MaxSidecarHosts+5)}, Hostname: "a.b.svc.cluster.local"}
	if sc.Imports(last, "app") {
		t.Error("a host past the bound is read")
	}
	first := &Service{Meta: Meta{Namespace: "ns0"}, Hostname: "a.ns0.svc.cluster.local"}
	if !sc.Imports(first, "app") {
		t.Error("a host within the bound is not read")
	}
}
