package grpcgen

import (
	"slices"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// scopeManifests add services of namespaces app and other, a
// two-port service, and a VirtualService of app sending echo's traffic
// to other's backend.
const scopeManifests = `
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
apiVersion: v1
kind: Service
metadata: {name: db, namespace: other}
spec:
  ports: [{name: grpc, port: 8080}]
`

const echoToBackend = `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-to-backend, namespace: app}
spec:
  hosts: [echo.app.svc.cluster.local]
  http: [{route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 8080}}}]}]
`

func sidecar(ns, name, selector, body string) string {
	doc := "\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n"
	if selector != "" {
		doc += "  workloadSelector: {labels: {" + selector + "}}\n"
	}
	return doc + body
}

// everyName is every client-side name of the services of scopeManifests
// and manifests.
var everyName = []string{
	"backend.other.svc.cluster.local:8080", "db.other.svc.cluster.local:8080", "echo.app.svc.cluster.local:8080",
	"two.app.svc.cluster.local:7070", "two.app.svc.cluster.local:7071",
}

func names(rs []Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func clusterOf(hostPort string) string {
	host, port, _ := strings.Cut(hostPort, ":")
	return "outbound|" + port + "||" + host
}

// TestSidecarScopesProxylessClients: the listeners, clusters and load
// assignments a client may ask for by name are those of the services its
// Sidecar lets it see, by the Sidecar Envoy sidecars would read (workload
// selector, namespace-wide, root namespace default), the rest absent; a
// wildcard request lists the same.
func TestSidecarScopesProxylessClients(t *testing.T) {
	other := &Proxy{Namespace: "other", Labels: map[string]string{"app": "x"}}
	for name, tc := range map[string]struct {
		config    string
		p         *Proxy
		want      []string
		wantOther []string
	}{
		"no Sidecar: every service exported to the namespace": {
			p: client, want: everyName, wantOther: everyName,
		},
		"a namespace-wide Sidecar of ./*": {
			config: sidecar("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n"),
			p:      client, want: everyName[2:], wantOther: everyName,
		},
		"the root namespace's default, read in each namespace": {
			config: sidecar("istio-system", "default", "", "  egress: [{hosts: [\"./*\"]}]\n"),
			p:      client, want: everyName[2:], wantOther: everyName[:2],
		},
		"a workloadSelector picks the client over the namespace's": {
			config: sidecar("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n") +
				sidecar("app", "client", "app: client", "  egress: [{hosts: [\"other/db.other.svc.cluster.local\"]}]\n"),
			p: client, want: everyName[1:2], wantOther: everyName,
		},
		"a workloadSelector that does not select the client": {
			config: sidecar("app", "canary", "app: canary", "  egress: [{hosts: [\"./*\"]}]\n"),
			p:      client, want: everyName, wantOther: everyName,
		},
		"an egress listener of one port imports that port alone": {
			config: sidecar("app", "default", "", "  egress: [{port: {number: 7071, protocol: GRPC, name: grpc}, hosts: [\"./*\"]}]\n"),
			p:      client, want: everyName[4:], wantOther: everyName,
		},
		"an imported VirtualService brings its destination": {
			config: echoToBackend + sidecar("app", "default", "", "  egress: [{hosts: [\"./echo.app.svc.cluster.local\"]}]\n"),
			p:      client, want: []string{everyName[0], everyName[2]}, wantOther: everyName,
		},
		"exclusions": {
			config: sidecar("app", "default", "", "  egress: [{hosts: [\"*/*\", \"~other/*\", \"~/two.app.svc.cluster.local\"]}]\n"),
			p:      client, want: everyName[2:3], wantOther: everyName,
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := load(t, scopeManifests+tc.config)
			g := &Generator{TrustDomain: td}
			for _, c := range []struct {
				p    *Proxy
				want []string
			}{{tc.p, tc.want}, {other, tc.wantOther}} {
				for _, typeURL := range []string{ListenerType, RouteType} {
					if got := names(g.Generate(snap, c.p, typeURL, everyName, false)); !slices.Equal(got, c.want) {
						t.Errorf("%s of %s asked by name: %q, want %q", typeURL, c.p.Namespace, got, c.want)
					}
					if got := names(g.Generate(snap, c.p, typeURL, nil, true)); !slices.Equal(got, c.want) {
						t.Errorf("%s of %s, wildcard: %q, want %q", typeURL, c.p.Namespace, got, c.want)
					}
				}
				var clusters, want []string
				for _, n := range everyName {
					clusters = append(clusters, clusterOf(n))
				}
				for _, n := range c.want {
					want = append(want, clusterOf(n))
				}
				slices.Sort(want)
				for _, typeURL := range []string{ClusterType, EndpointType} {
					if got := names(g.Generate(snap, c.p, typeURL, clusters, false)); !slices.Equal(got, want) {
						t.Errorf("%s of %s: %q, want %q", typeURL, c.p.Namespace, got, want)
					}
				}
			}
		})
	}
}

// TestSidecarDecidesProxylessRoutes: a VirtualService claims a service's
// routes only when the client's Sidecar imports it; a service the client
// sees only as an imported VirtualService's destination has a route
// configuration without virtual hosts, as Istio's.
func TestSidecarDecidesProxylessRoutes(t *testing.T) {
	const echo = "echo.app.svc.cluster.local:8080"
	routeTo := func(t *testing.T, snap *model.Snapshot, name string) *route.RouteConfiguration {
		t.Helper()
		g := &Generator{TrustDomain: td}
		rs := g.Generate(snap, client, RouteType, []string{name}, false)
		if len(rs) != 1 {
			t.Fatalf("route %s: %d resources", name, len(rs))
		}
		m, err := rs[0].Message(RouteType)
		if err != nil {
			t.Fatal(err)
		}
		return m.(*route.RouteConfiguration)
	}
	clusterOfRoute := func(rc *route.RouteConfiguration) string {
		return rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
	}
	imported := load(t, scopeManifests+echoToBackend+sidecar("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n"))
	if got := clusterOfRoute(routeTo(t, imported, echo)); got != "outbound|8080||backend.other.svc.cluster.local" {
		t.Errorf("an imported VirtualService: echo routed to %q", got)
	}
	if rc := routeTo(t, imported, "backend.other.svc.cluster.local:8080"); len(rc.GetVirtualHosts()) != 0 {
		t.Errorf("backend, seen as a destination alone: %d virtual hosts, want none", len(rc.GetVirtualHosts()))
	}
	// A VirtualService of another namespace that the egress hosts do
	// not import (its namespace is not other's) does not apply.
	notImported := load(t, scopeManifests+strings.ReplaceAll(echoToBackend, "namespace: app", "namespace: other")+
		sidecar("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n"))
	if got := clusterOfRoute(routeTo(t, notImported, echo)); got != "outbound|8080||echo.app.svc.cluster.local" {
		t.Errorf("a VirtualService the Sidecar does not import: echo routed to %q", got)
	}
	// Without the Sidecar the same VirtualService applies.
	unscoped := load(t, scopeManifests+strings.ReplaceAll(echoToBackend, "namespace: app", "namespace: other"))
	if got := clusterOfRoute(routeTo(t, unscoped, echo)); got != "outbound|8080||backend.other.svc.cluster.local" {
		t.Errorf("without a Sidecar: echo routed to %q", got)
	}
	// Route keys differ where the Sidecar decides the content.
	g := &Generator{TrustDomain: td}
	a := g.Generate(imported, client, RouteType, []string{echo}, false)[0].Key
	b := g.Generate(notImported, client, RouteType, []string{echo}, false)[0].Key
	if a == b {
		t.Errorf("route keys equal (%q) for different routes", a)
	}
}

// TestUnsupportedInSidecar: what proxyless clients do not read of a
// Sidecar is listed; egress and REGISTRY_ONLY are not.
func TestUnsupportedInSidecar(t *testing.T) {
	snap := load(t, sidecar("app", "read", "", "  egress: [{hosts: [\"./*\"]}]\n  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")+
		sidecar("app", "ignored", "app: x", "  ingress: [{port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: \"127.0.0.1:8080\"}]\n  inboundConnectionPool: {http: {http1MaxPendingRequests: 10}}\n  outboundTrafficPolicy: {mode: ALLOW_ANY}\n"))
	got := map[string][]string{}
	for _, sc := range snap.Sidecars() {
		got[sc.Name] = UnsupportedInSidecar(sc)
	}
	if len(got["read"]) != 0 {
		t.Errorf("a Sidecar of egress and REGISTRY_ONLY: %q", got["read"])
	}
	if len(got["ignored"]) != 3 {
		t.Errorf("ingress, inboundConnectionPool, ALLOW_ANY: %q", got["ignored"])
	}
}
