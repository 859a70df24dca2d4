package model_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

const entryManifests = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: external, namespace: app, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: [api.example.com, "*.wild.example.com"]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: https, number: 443, protocol: TLS}, {name: http, number: 80, protocol: HTTP, targetPort: 8080}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: app}
spec:
  hosts: [db.internal]
  addresses: [240.0.0.1, 240.0.0.2/32, 10.0.0.0/8]
  location: MESH_INTERNAL
  resolution: STATIC
  subjectAltNames: [spiffe://cluster.local/ns/app/sa/db]
  exportTo: ["."]
  ports: [{name: tcp-db, number: 5432, protocol: TCP}]
  endpoints:
  - {address: 10.1.0.1, serviceAccount: db, ports: {tcp-db: 15432}}
  - {address: 10.1.0.2, labels: {security.istio.io/tlsMode: disabled}, serviceAccount: db}
  - {address: 10.1.0.3}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: app}
spec:
  hosts: [vm.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  workloadSelector: {labels: {app: vm}}
  ports: [{name: http, number: 80, targetPort: 9080, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: app}
spec: {address: 10.2.0.1, labels: {app: vm}, serviceAccount: vm, ports: {http: 9999}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-other, namespace: other}
spec: {address: 10.2.0.2, labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: shadow, namespace: other, creationTimestamp: "2026-02-01T00:00:00Z"}
spec:
  hosts: [api.example.com, echo.app.svc.cluster.local, passthrough.example.com]
  resolution: NONE
  ports: [{name: tcp, number: 9000, targetPort: 9001, protocol: TCP}]
`

// TestServiceEntriesAreServices: each host of a ServiceEntry is a service
// of the snapshot, with Istio's endpoints (the entry's own, selected
// WorkloadEntries of its namespace, or the host itself under DNS) and an
// Entry saying how it differs; a host a Kubernetes service or an older
// entry holds is left to it.
func TestServiceEntriesAreServices(t *testing.T) {
	snap := modeltest.Load(t, diffBase+"---"+entryManifests)
	if got := len(snap.ServiceEntries()); got != 4 {
		t.Fatalf("%d entries", got)
	}
	api := snap.Service("api.example.com")
	if api == nil || api.Entry == nil || !api.Entry.External || api.Entry.Resolution != networkingv1.ServiceEntry_DNS || api.Namespace != "app" {
		t.Fatalf("api.example.com: %+v", api)
	}
	if eps := api.Endpoints[80]; len(eps) != 1 || eps[0].Address != "api.example.com" || eps[0].Port != 8080 || eps[0].TLSMode() != "" {
		t.Errorf("DNS endpoints of port 80: %+v", eps)
	}
	if w := snap.Service("*.wild.example.com"); w == nil || len(w.Endpoints[443]) != 0 {
		t.Errorf("a wildcard DNS host has no endpoints: %+v", w)
	}
	db := snap.Service("db.internal")
	if db == nil || db.Entry.External || len(db.Addresses) != 2 || db.Addresses[1] != "240.0.0.2" ||
		len(db.Entry.SubjectAltNames) != 1 || db.ExportTo[0] != "." {
		t.Fatalf("db.internal: %+v", db)
	}
	eps := db.Endpoints[5432]
	if len(eps) != 3 || eps[0].Port != 15432 || eps[0].TLSMode() != "istio" || eps[1].TLSMode() != "disabled" ||
		eps[2].TLSMode() != "" || eps[2].Port != 5432 {
		t.Errorf("db endpoints: %+v", eps)
	}
	vm := snap.Service("vm.internal")
	if vm == nil || len(vm.Endpoints[80]) != 1 || vm.Endpoints[80][0].Address != "10.2.0.1" || vm.Endpoints[80][0].Port != 9999 ||
		vm.Endpoints[80][0].TLSMode() != "istio" {
		t.Errorf("vm.internal selects the WorkloadEntries of its namespace: %+v", vm)
	}
	if echo := snap.Service("echo.app.svc.cluster.local"); echo == nil || echo.Entry != nil {
		t.Errorf("a Kubernetes service keeps its hostname: %+v", echo)
	}
	if pt := snap.Service("passthrough.example.com"); pt == nil || pt.Namespace != "other" || pt.Entry.Resolution != networkingv1.ServiceEntry_NONE ||
		pt.Entry.TargetPorts[9000] != 9001 || !pt.Entry.External {
		t.Errorf("passthrough.example.com: %+v", pt)
	}
	// (No location is MESH_EXTERNAL, the enum's zero.) The older entry
	// keeps api.example.com.
	if api.Meta.Name != "external" {
		t.Errorf("api.example.com from %s", api.Meta.Name)
	}
	for i, svc := range snap.Services()[1:] {
		if snap.Services()[i].Hostname >= svc.Hostname {
			t.Errorf("services not sorted by hostname at %s", svc.Hostname)
		}
	}
}

// TestDiffOfServiceEntries: an entry's endpoints alone are an endpoint
// change of its hosts; anything else of it a change of its services; an
// unchanged entry nothing.
func TestDiffOfServiceEntries(t *testing.T) {
	base := diffBase + "---" + entryManifests
	old := modeltest.Load(t, base)
	if d := model.Diff(old, modeltest.Load(t, base)); !d.None() {
		t.Fatalf("the same manifests differ: %+v", d)
	}
	for name, tc := range map[string]struct {
		edit      func(string) string
		services  []string
		endpoints []string
	}{
		"an inline endpoint's address": {
			edit:      func(s string) string { return strings.Replace(s, "address: 10.1.0.3", "address: 10.1.0.4", 1) },
			endpoints: []string{"db.internal"},
		},
		"a selected WorkloadEntry's address": {
			edit:      func(s string) string { return strings.Replace(s, "address: 10.2.0.1", "address: 10.2.0.9", 1) },
			endpoints: []string{"vm.internal"},
		},
		"the location": {
			edit: func(s string) string {
				return strings.Replace(s, "location: MESH_EXTERNAL", "location: MESH_INTERNAL", 1)
			},
			services: []string{"*.wild.example.com", "api.example.com"},
		},
		"the resolution": {
			edit: func(s string) string { return strings.Replace(s, "resolution: NONE", "resolution: STATIC", 1) },
			// The entry's other hosts are the services namespace other
			// sees of those hostnames.
			services: []string{"api.example.com", "echo.app.svc.cluster.local", "passthrough.example.com"},
		},
		"exportTo": {
			edit:     func(s string) string { return strings.Replace(s, `exportTo: ["."]`, `exportTo: ["*"]`, 1) },
			services: []string{"db.internal"},
		},
		"a host added": {
			edit: func(s string) string {
				return strings.Replace(s, "hosts: [db.internal]", "hosts: [db.internal, db2.internal]", 1)
			},
			services: []string{"db2.internal"},
		},
		"the older entry recreated after the other": {
			edit: func(s string) string {
				return strings.Replace(s, `creationTimestamp: "2026-01-01T00:00:00Z"`, `creationTimestamp: "2026-03-01T00:00:00Z"`, 1)
			},
			services: []string{"api.example.com"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			next := tc.edit(base)
			if next == base {
				t.Fatal("the edit changed nothing")
			}
			d := model.Diff(old, modeltest.Load(t, next))
			if d.Config || !sameKeys(d.Services, tc.services) || !sameKeys(d.Endpoints, tc.endpoints) {
				t.Errorf("got %+v, want services %v, endpoints %v", d, tc.services, tc.endpoints)
			}
		})
	}
}

func sameKeys(m map[string]bool, want []string) bool {
	if len(m) != len(want) {
		return false
	}
	for _, k := range want {
		if !m[k] {
			return false
		}
	}
	return true
}

func TestFileModelRefusesAServiceEntryWithoutHosts(t *testing.T) {
	bad := strings.Replace(entryManifests, "hosts: [vm.internal]", "hosts: []", 1)
	if _, err := loadString(t, bad); err == nil {
		t.Error("loaded")
	}
	if _, err := loadString(t, strings.Replace(entryManifests, "resolution: NONE", "resolushun: NONE", 1)); err == nil {
		t.Error("an unknown field loaded")
	}
}

func loadString(t *testing.T, manifests string) (*model.Snapshot, error) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	return model.LoadDir(dir, model.Options{})
}

// TestServiceEntryExportTo: an entry's exportTo is its services', read as
// a Service's exportTo annotation, the mesh default applying without it.
func TestServiceEntryExportTo(t *testing.T) {
	snap := modeltest.Load(t, diffBase+"---"+entryManifests)
	db, api := snap.Service("db.internal"), snap.Service("api.example.com")
	if !snap.ServiceVisible(db, "app") || snap.ServiceVisible(db, "other") {
		t.Error("exportTo . is not the entry's namespace alone")
	}
	if !snap.ServiceVisible(api, "other") {
		t.Error("an entry without exportTo is not visible everywhere")
	}
	private := snap.WithExportDefaults([]string{"."}, nil)
	if private.ServiceVisible(private.Service("api.example.com"), "other") || !private.ServiceVisible(private.Service("api.example.com"), "app") {
		t.Error("the mesh default does not apply to an entry without exportTo")
	}
	if got := snap.ServicesVisibleTo("other"); slices.ContainsFunc(got, func(s *model.Service) bool { return s.Hostname == "db.internal" }) {
		t.Error("ServicesVisibleTo lists an entry not exported to the namespace")
	}
}

// TestServiceEntriesLeaveOutWhatEnvoyRefuses: hosts that are not names or
// that a Kubernetes service answers to, ports out of range or listed
// twice, an address another service has, and, without DNS, endpoints that
// are not addresses are left out; the rest of the entry is served.
func TestServiceEntriesLeaveOutWhatEnvoyRefuses(t *testing.T) {
	snap := modeltest.Load(t, diffBase+`
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bad, namespace: other}
spec:
  hosts: ["bad host", "a*b.example.com", echo.app, echo.app.svc, echo, web.app.svc.cluster.local, ok.example.com, also.example.com]
  addresses: [10.96.0.10, 240.0.0.7]
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}, {name: again, number: 80, protocol: HTTP}, {name: big, number: 70000, protocol: TCP}]
  endpoints: [{address: 10.5.0.1}, {address: not-an-ip.example.com}, {address: 10.5.0.2, ports: {http: 99999}}]
`)
	for _, h := range []string{"bad host", "a*b.example.com", "echo.app", "echo.app.svc", "echo"} {
		if snap.Service(h) != nil {
			t.Errorf("host %q is served", h)
		}
	}
	if web := snap.Service("web.app.svc.cluster.local"); web == nil || web.Entry != nil {
		t.Error("the entry took a Kubernetes service's hostname")
	}
	ok := snap.Service("ok.example.com")
	if ok == nil || len(ok.Ports) != 1 || ok.Ports[0].Port != 80 || !slices.Equal(ok.Addresses, []string{"240.0.0.7"}) {
		t.Fatalf("ok.example.com: %+v", ok)
	}
	if eps := ok.Endpoints[80]; len(eps) != 2 || eps[0].Address != "10.5.0.1" || eps[1].Port != 80 {
		t.Errorf("endpoints %+v", eps)
	}
	if also := snap.Service("also.example.com"); also == nil || len(also.Addresses) != 0 {
		t.Errorf("the second host repeats the first's addresses: %+v", also)
	}
	// Hosts another service has depend on other objects, which
	// validation does not see: they are noted for the server to report.
	var taken []string
	for _, n := range snap.ServiceEntryNotes() {
		if n.Entry != (model.Meta{Name: "bad", Namespace: "other"}) {
			t.Errorf("note of %v", n.Entry)
		}
		taken = append(taken, n.Host)
	}
	if want := []string{"echo.app", "echo.app.svc", "echo"}; !slices.Equal(taken, want) {
		t.Errorf("hosts noted as taken %q, want %q", taken, want)
	}
	// A Kubernetes service's hostname in an entry of another namespace is
	// what that namespace sees of it, as in Istio; the others keep the
	// Kubernetes service.
	if web := snap.VisibleService("web.app.svc.cluster.local", "other"); web == nil || web.Entry == nil {
		t.Errorf("namespace other sees %+v, want its entry", web)
	}
	if web := snap.VisibleService("web.app.svc.cluster.local", "app"); web == nil || web.Entry != nil {
		t.Errorf("namespace app sees %+v, want the Kubernetes service", web)
	}
}

// TestOneHostInSeveralNamespaces: entries of several namespaces for one
// host each stay, and each namespace sees the one Istio's sidecar scope
// chooses: its own, else a Kubernetes service, else the oldest exported
// to it by name, else the oldest public one; one it cannot see, none.
func TestOneHostInSeveralNamespaces(t *testing.T) {
	se := func(ns, created, exportTo, addr string) string {
		return fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dup, namespace: %s, creationTimestamp: %q}
spec:
  hosts: [dup.example.com, web.app.svc.cluster.local]
  exportTo: %s
  resolution: STATIC
  ports: [{name: tcp, number: 7000, protocol: TCP}]
  endpoints: [{address: %s}]
`, ns, created, exportTo, addr)
	}
	snap := modeltest.Load(t, diffBase+
		se("a", "2026-01-01T00:00:00Z", `[a]`, "192.0.2.1")+
		se("b", "2026-01-01T00:01:00Z", `["*"]`, "192.0.2.2")+
		se("c", "2026-01-01T00:02:00Z", `["*"]`, "192.0.2.3")+
		se("d", "2026-01-01T00:03:00Z", `[x, .]`, "192.0.2.4"))
	for ns, want := range map[string]string{
		"a": "a", // its own
		"c": "c", // its own, though b's is older
		"x": "d", // exported to it by name, before the public ones
		"y": "b", // the oldest public one
	} {
		if got := snap.VisibleService("dup.example.com", ns); got == nil || got.Namespace != want {
			t.Errorf("namespace %s sees %+v, want %s's", ns, got, want)
		}
	}
	if got := snap.Service("dup.example.com"); got == nil || got.Namespace != "a" {
		t.Errorf("the snapshot's service is %+v, want the oldest entry's", got)
	}
	// A Kubernetes service's hostname: every namespace without an entry
	// of its own keeps the service, even one an entry is exported to by
	// name.
	for ns, want := range map[string]string{"app": "app", "y": "app", "b": "b", "x": "app"} {
		got := snap.VisibleService("web.app.svc.cluster.local", ns)
		if got == nil || got.Namespace != want {
			t.Errorf("namespace %s sees web as %+v, want %s's", ns, got, want)
		}
	}
	// Every namespace's list has one service per hostname.
	for _, ns := range []string{"a", "b", "x", "y"} {
		seen := map[string]bool{}
		for _, svc := range snap.ServicesVisibleTo(ns) {
			if seen[svc.Hostname] {
				t.Errorf("namespace %s sees %s twice", ns, svc.Hostname)
			}
			seen[svc.Hostname] = true
		}
		if !seen["dup.example.com"] {
			t.Errorf("namespace %s sees no dup.example.com", ns)
		}
	}
	if len(snap.HostChoices("x")) != 2 {
		t.Errorf("host choices %q", snap.HostChoices("x"))
	}
}
