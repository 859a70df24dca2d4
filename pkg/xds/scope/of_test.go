package scope

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

const ofManifests = `
apiVersion: v1
kind: Service
metadata: {name: a, namespace: app}
spec:
  ports: [{name: http, port: 80}, {name: grpc, port: 9090}]
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: app}
spec:
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: other}
spec:
  ports: [{name: http, port: 80}, {name: grpc, port: 9090}]
---
apiVersion: v1
kind: Service
metadata: {name: hidden, namespace: other, annotations: {networking.istio.io/exportTo: "."}}
spec:
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: other}
spec:
  hosts: [api.example.com, db.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: short, namespace: app}
spec:
  hosts: [a]
  http: [{route: [{destination: {host: c.other.svc.cluster.local, port: {number: 9090}}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: wild, namespace: other}
spec:
  hosts: ["*.example.com"]
  tls: [{match: [{sniHosts: [api.example.com]}], route: [{destination: {host: api.example.com}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: root, namespace: app}
spec:
  hosts: [b.app.svc.cluster.local]
  http: [{match: [{uri: {prefix: /x}}], delegate: {name: leaf, namespace: other}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: leaf, namespace: other}
spec:
  http: [{route: [{destination: {host: hidden.other.svc.cluster.local}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: private, namespace: other}
spec:
  hosts: [c.other.svc.cluster.local]
  exportTo: ["."]
  http: [{route: [{destination: {host: c.other.svc.cluster.local}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: elsewhere, namespace: other}
spec:
  hosts: [c.other.svc.cluster.local]
  http: [{route: [{destination: {host: a.app.svc.cluster.local, port: {number: 80}}}]}]
`

// TestViewOfExactHostsIsTheViewThroughTheMesh: a Sidecar naming its
// hosts exactly (its view found by name: the services it names, the
// VirtualServices with one of those hosts) sees what the same Sidecar
// with a wildcard host that imports nothing more sees (its view found by
// going through every service and VirtualService), for several
// Sidecars: one listener or several, a port, "./", "*/", an excluded
// namespace, a host no service has.
func TestViewOfExactHostsIsTheViewThroughTheMesh(t *testing.T) {
	snap := modeltest.Load(t, ofManifests)
	o := routes.Options{}
	for name, egress := range map[string][][]string{
		"one listener":          {{"./a.app.svc.cluster.local", "other/c.other.svc.cluster.local", "other/api.example.com"}},
		"any namespace":         {{"*/b.app.svc.cluster.local", "*/db.example.com", "*/hidden.other.svc.cluster.local"}},
		"an excluded namespace": {{"*/c.other.svc.cluster.local", "~other/c.other.svc.cluster.local", "app/a.app.svc.cluster.local"}},
		"no such host":          {{"app/nothing.app.svc.cluster.local"}},
		"several listeners":     {{"app/a.app.svc.cluster.local"}, {"other/c.other.svc.cluster.local", "./b.app.svc.cluster.local"}},
	} {
		t.Run(name, func(t *testing.T) {
			exact := sidecarOf(egress, "")
			wide := sidecarOf(egress, "nowhere/*")
			if exactNames(exact) == nil || exactNames(wide) != nil {
				t.Fatal("the Sidecars do not take the two ways")
			}
			got, want := describe(Of(snap, exact, "app", o)), describe(Of(snap, wide, "app", o))
			if got != want {
				t.Errorf("found by name:\n%s\nthrough the mesh:\n%s", got, want)
			}
			if name != "no such host" && !strings.Contains(want, ".svc.cluster.local") {
				t.Errorf("the view is empty: the comparison shows nothing\n%s", want)
			}
		})
	}
}

// sidecarOf is a Sidecar of namespace app whose egress listeners import
// hosts (the second on port 80), with extra added to each when not "".
func sidecarOf(hosts [][]string, extra string) *model.Sidecar {
	spec := &networkingv1.Sidecar{}
	for i, h := range hosts {
		h = slices.Clone(h)
		if extra != "" {
			h = append(h, extra)
		}
		l := &networkingv1.IstioEgressListener{Hosts: h}
		if i == 1 {
			l.Port = &networkingv1.SidecarPort{Number: 80, Protocol: "HTTP", Name: "http"}
		}
		spec.Egress = append(spec.Egress, l)
	}
	return &model.Sidecar{Meta: model.Meta{Namespace: "app", Name: "default"}, Spec: spec}
}

// describe writes what v holds: its services with their ports, those
// listed, its VirtualServices in order, its listeners.
func describe(v *View) string {
	var b strings.Builder
	services := func(svcs []*model.Service) {
		for _, s := range svcs {
			fmt.Fprintf(&b, " %s%v", s.Hostname, portNumbers(s))
		}
		b.WriteString("\n")
	}
	b.WriteString("services:")
	services(v.Services)
	b.WriteString("listed:")
	services(v.Listed)
	b.WriteString("virtual services:")
	for _, vs := range v.VirtualServices {
		fmt.Fprintf(&b, " %s/%s", vs.Namespace, vs.Name)
		if !v.VS[vs.Meta] {
			b.WriteString("(not in VS)")
		}
	}
	fmt.Fprintf(&b, " (%d)\n", len(v.VS))
	for _, l := range v.Listeners {
		fmt.Fprintf(&b, "listener %d:", l.Port)
		for _, p := range slices.Sorted(maps.Keys(l.ByPort)) {
			fmt.Fprintf(&b, " %d:", p)
			for _, s := range l.ByPort[p] {
				fmt.Fprintf(&b, " %s", s.Hostname)
			}
		}
		fmt.Fprintf(&b, " vs %d\n", len(l.VS))
	}
	return b.String()
}

func portNumbers(s *model.Service) []uint32 {
	var out []uint32
	for _, p := range s.Ports {
		out = append(out, p.Port)
	}
	return out
}
