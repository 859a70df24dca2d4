package scope

import (
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

const manifests = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  ports: [{name: grpc, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: two, namespace: app}
spec:
  ports: [{name: grpc, port: 7070}, {name: grpc-admin, port: 7071}]
---
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: other}
spec:
  ports: [{name: grpc, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo.app.svc.cluster.local]
  http: [{route: [{destination: {host: backend.other.svc.cluster.local}}]}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: app}
spec:
  egress:
  - {port: {number: 7070, protocol: GRPC, name: grpc}, hosts: ["./*"]}
  - {hosts: ["other/*"]}
`

// TestViewOfSeveralEgressListeners: a route reads the egress listener of
// its port, else the catch-all, for the services it lists and the
// VirtualServices it imports; a port listener imports its port alone.
func TestViewOfSeveralEgressListeners(t *testing.T) {
	snap := modeltest.Load(t, manifests)
	vss, _ := routes.Options{}.MeshVirtualServices(snap, "app")
	v := Build(snap, snap.SidecarFor("app", nil), "app", vss)
	if len(v.Listeners) != 2 || v.Listeners[0].Port != 7070 || v.Listeners[1].Port != 0 {
		t.Fatalf("listeners %+v", v.Listeners)
	}
	var hosts []string
	for _, s := range v.Services {
		hosts = append(hosts, s.Hostname)
	}
	if len(hosts) != 2 || hosts[0] != "backend.other.svc.cluster.local" || hosts[1] != "two.app.svc.cluster.local" {
		t.Fatalf("services %q", hosts)
	}
	if ports := v.ByHost["two.app.svc.cluster.local"].Ports; len(ports) != 1 || ports[0].Port != 7070 {
		t.Errorf("two's ports %+v, want 7070 alone", ports)
	}
	for _, c := range []struct {
		host string
		port uint32
		want bool
	}{
		{"two.app.svc.cluster.local", 7070, true},
		{"two.app.svc.cluster.local", 7071, false},
		{"backend.other.svc.cluster.local", 8080, true},
		{"echo.app.svc.cluster.local", 8080, false},
	} {
		if got := v.ListedOn(c.host, c.port); got != c.want {
			t.Errorf("ListedOn(%s, %d) = %t", c.host, c.port, got)
		}
	}
	var echo *model.VirtualService
	for _, vs := range vss {
		if vs.Name == "echo" {
			echo = vs
		}
	}
	if echo == nil {
		t.Fatal("no VirtualService echo seen from app")
	}
	if !v.ImportsVirtualServiceOn(echo, 7070) || v.ImportsVirtualServiceOn(echo, 8080) {
		t.Errorf("echo's VirtualService imported on 7070 %t, on 8080 %t; want the port listener's alone",
			v.ImportsVirtualServiceOn(echo, 7070), v.ImportsVirtualServiceOn(echo, 8080))
	}
}
