package model_test

import (
	"fmt"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

func entryAt(name, created, spec string) string {
	return fmt.Sprintf("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: app, creationTimestamp: %q}\nspec:\n%s", name, created, spec)
}

// TestEntriesOfOneNamespaceMerge: a newer entry of the same namespace for
// a host adds the ports the older lacks and its endpoints to the ports of
// the same name, as Istio; one of another resolution is left out and
// noted.
func TestEntriesOfOneNamespaceMerge(t *testing.T) {
	older := entryAt("a", "2026-01-01T00:00:00Z", `  hosts: [m.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.1}]
`)
	for name, tc := range map[string]struct {
		newer     string
		ports     string
		endpoints string
		notes     int
	}{
		"a port added, endpoints joined by port name": {
			newer: entryAt("b", "2026-01-01T00:05:00Z", `  hosts: [m.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: alt, number: 8080, protocol: HTTP}, {name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.2}]
`),
			ports:     "[80 8080]",
			endpoints: "80:[192.0.2.1:80 192.0.2.2:80] 8080:[192.0.2.2:8080]",
		},
		"another resolution is left out": {
			newer: entryAt("b", "2026-01-01T00:05:00Z", `  hosts: [m.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: alt, number: 8080, protocol: HTTP}]
`),
			ports:     "[80]",
			endpoints: "80:[192.0.2.1:80]",
			notes:     1,
		},
		"other addresses are left out": {
			newer: entryAt("b", "2026-01-01T00:05:00Z", `  hosts: [m.example.com]
  addresses: [240.240.9.1]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: alt, number: 8080, protocol: HTTP}]
  endpoints: [{address: 192.0.2.2}]
`),
			ports:     "[80]",
			endpoints: "80:[192.0.2.1:80]",
			notes:     1,
		},
		"another exportTo is left out": {
			newer: entryAt("b", "2026-01-01T00:05:00Z", `  hosts: [m.example.com]
  exportTo: ["."]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: alt, number: 8080, protocol: HTTP}]
  endpoints: [{address: 192.0.2.2}]
`),
			ports:     "[80]",
			endpoints: "80:[192.0.2.1:80]",
			notes:     1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, older+tc.newer)
			svc := snap.Service("m.example.com")
			if svc == nil {
				t.Fatal("no service m.example.com")
			}
			var ports []uint32
			eps := ""
			for _, p := range svc.Ports {
				ports = append(ports, p.Port)
				var addrs []string
				for _, e := range svc.Endpoints[p.Port] {
					addrs = append(addrs, fmt.Sprintf("%s:%d", e.Address, e.Port))
				}
				if eps != "" {
					eps += " "
				}
				eps += fmt.Sprintf("%d:%v", p.Port, addrs)
			}
			if got := fmt.Sprint(ports); got != tc.ports {
				t.Errorf("ports %s, want %s", got, tc.ports)
			}
			if eps != tc.endpoints {
				t.Errorf("endpoints %s, want %s", eps, tc.endpoints)
			}
			if n := len(snap.ServiceEntryNotes()); n != tc.notes {
				t.Errorf("%d notes (%v), want %d", n, snap.ServiceEntryNotes(), tc.notes)
			}
		})
	}
}
