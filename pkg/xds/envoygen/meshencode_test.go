package envoygen

import (
	"bytes"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// encodedMesh adds to routedMesh a VirtualService using most of what the
// translation makes on sidecars.
const encodedMesh = routedMesh + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: busy, namespace: web}
spec:
  hosts: [other.web.svc.cluster.local, ext.example.com]
  http:
  - name: canary
    match: [{uri: {prefix: /api/}, headers: {x-canary: {exact: "true"}}, queryParams: {q: {regex: "[0-9]+"}}}]
    route:
    - {destination: {host: other.web.svc.cluster.local, port: {number: 80}}, weight: 90}
    - {destination: {host: echo.app.svc.cluster.local, port: {number: 80}}, weight: 10, headers: {request: {set: {x-w: "1"}}}}
    headers: {request: {add: {x-a: "1"}, remove: [x-b]}, response: {set: {cache-control: max-age=60}}}
  - name: static
    match: [{uri: {regex: "/static/[a-z0-9]+\\.(css|js)"}, ignoreUriCase: true}]
    rewrite: {uri: /assets/, authority: cdn.example.com}
    route: [{destination: {host: other.web.svc.cluster.local}}]
    fault: {delay: {fixedDelay: 1s, percentage: {value: 5}}}
    corsPolicy: {allowOrigins: [{exact: "https://a.example.com"}], allowMethods: [GET]}
  - name: old
    match: [{uri: {exact: /old}}]
    redirect: {uri: /new, redirectCode: 302}
  - name: default
    route: [{destination: {host: other.web.svc.cluster.local}}]
    retries: {attempts: 3, perTryTimeout: 2s, retryOn: "5xx,reset,503"}
    timeout: 10s
    mirror: {host: echo.app.svc.cluster.local}
    mirrorPercentage: {value: 5}
`

// sidecarRoutes are the encodings of p's route configurations that g
// generates from snap, by name, each checked against proto's
// deterministic marshalling of what it decodes to.
func sidecarRoutes(t *testing.T, g *Generator, snap *model.Snapshot, p *Proxy) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, r := range g.Generate(snap, p, resource.RouteType, nil, true) {
		raw, err := r.Marshal()
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		var rc route.RouteConfiguration
		if err := proto.Unmarshal(raw, &rc); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if err := rc.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&rc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, want) {
			t.Errorf("%s: encoded %d bytes differ from proto's deterministic marshalling (%d bytes)", r.Name, len(raw), len(want))
		}
		out[r.Name] = raw
	}
	return out
}

// TestSidecarRoutesAreEncodedAsProtoMarshalsThem: the route configurations
// of sidecars of two namespaces and label sets, from one generator (whose
// translations the later proxies reuse) and from fresh ones, are the same
// bytes, and those proto's deterministic marshalling writes.
func TestSidecarRoutesAreEncodedAsProtoMarshalsThem(t *testing.T) {
	snap := modeltest.Load(t, encodedMesh)
	shared := &Generator{TrustDomain: td}
	proxies := []*Proxy{
		{Namespace: "app", Labels: map[string]string{"app": "sleep"}},
		{Namespace: "app", Labels: map[string]string{"app": "client"}},
		{Namespace: "web", Labels: map[string]string{"app": "sleep"}},
		{Namespace: "app", Labels: map[string]string{"app": "sleep", "version": "v2"}},
	}
	for round := range 2 {
		for _, p := range proxies {
			got := sidecarRoutes(t, shared, snap, p)
			want := sidecarRoutes(t, &Generator{TrustDomain: td}, snap, p)
			if len(want["80"]) == 0 {
				t.Fatal("no route 80")
			}
			for name, raw := range want {
				if !bytes.Equal(got[name], raw) {
					t.Errorf("round %d, %s/%v: %s differs from a fresh generator's", round, p.Namespace, p.Labels, name)
				}
			}
		}
	}
	var rc route.RouteConfiguration
	if err := proto.Unmarshal(sidecarRoutes(t, shared, snap, proxies[2])["80"], &rc); err != nil {
		t.Fatal(err)
	}
	routed := 0
	for _, vh := range rc.GetVirtualHosts() {
		if len(vh.GetRoutes()) > 1 {
			routed++
		}
	}
	if routed == 0 {
		t.Error("no virtual host has the busy VirtualService's routes: the test checks little")
	}
}
