package envoygen

import (
	"slices"
	"strings"
	"testing"

	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// scopeManifests add a control plane Service, an external host and a
// VirtualService of namespace web sending echo's traffic to "other".
const scopeManifests = manifests + `
---
apiVersion: v1
kind: Service
metadata: {name: istiod, namespace: istio-system}
spec:
  clusterIP: 10.96.9.1
  ports: [{name: grpc-xds, port: 15012}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: web}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
`

const sleepIP = "10.0.0.9"

func sidecarDoc(ns, name, selector, body string) string {
	doc := "\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n"
	if selector != "" {
		doc += "  workloadSelector: {labels: {" + selector + "}}\n"
	}
	return doc + body
}

func clusterNames(c config) []string {
	var out []string
	for n := range c.clusters {
		if strings.HasPrefix(n, "outbound|") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// TestSidecarScopesEgress: a proxy gets the clusters, load assignments,
// listeners and virtual hosts of what its Sidecar imports, and nothing
// else; one of another namespace, or not selected, keeps the rest.
func TestSidecarScopesEgress(t *testing.T) {
	g := &Generator{TrustDomain: td}
	sleep := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{sleepIP}}
	web := &Proxy{Namespace: "web", Labels: map[string]string{"app": "other"}, IPs: []string{"10.0.1.5"}}
	for name, tc := range map[string]struct {
		sidecars      string
		sleep, inWeb  []string
		registryOnly  bool
		webRegistry   bool
		sleepVHDomain string // a domain route "80" must have for sleep, "" none
	}{
		"namespace-wide ./* and istio-system/*": {
			sidecars: sidecarDoc("app", "default", "", "  egress: [{hosts: [\"./*\", \"istio-system/*\"]}]\n"),
			sleep: []string{"outbound|15012||istiod.istio-system.svc.cluster.local", "outbound|5000||echo.app.svc.cluster.local",
				"outbound|7070||echo.app.svc.cluster.local", "outbound|80||echo.app.svc.cluster.local", "outbound|9090||echo.app.svc.cluster.local"},
			inWeb: allOutbound,
		},
		"the root namespace's default for every namespace": {
			sidecars: sidecarDoc("istio-system", "default", "", "  egress: [{hosts: [\"./*\"]}]\n"),
			sleep: []string{"outbound|5000||echo.app.svc.cluster.local", "outbound|7070||echo.app.svc.cluster.local",
				"outbound|80||echo.app.svc.cluster.local", "outbound|9090||echo.app.svc.cluster.local"},
			inWeb: []string{"outbound|80||api.example.com", "outbound|80||other.web.svc.cluster.local", "outbound|80|plain|other.web.svc.cluster.local"},
		},
		"a workloadSelector picks its workloads only": {
			sidecars: sidecarDoc("app", "sleep", "app: sleep", "  egress: [{hosts: [\"web/api.example.com\"]}]\n  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n") +
				sidecarDoc("app", "default", "", "  egress: [{hosts: [\"*/*\"]}]\n"),
			sleep:        []string{"outbound|80||api.example.com"},
			inWeb:        allOutbound,
			registryOnly: true,
		},
		"a port listener imports that port": {
			sidecars: sidecarDoc("app", "default", "", "  egress: [{port: {number: 80, name: http}, hosts: [\"*/*\"]}, {hosts: [\"istio-system/*\"]}]\n"),
			sleep: []string{"outbound|15012||istiod.istio-system.svc.cluster.local", "outbound|80||api.example.com",
				"outbound|80||echo.app.svc.cluster.local", "outbound|80||other.web.svc.cluster.local", "outbound|80|plain|other.web.svc.cluster.local"},
			inWeb: allOutbound,
		},
		"exclusions": {
			sidecars: sidecarDoc("app", "default", "", "  egress: [{hosts: [\"*/*\", \"~web/*\", \"~/istiod.istio-system.svc.cluster.local\"]}]\n"),
			sleep: []string{"outbound|5000||echo.app.svc.cluster.local", "outbound|7070||echo.app.svc.cluster.local",
				"outbound|80||echo.app.svc.cluster.local", "outbound|9090||echo.app.svc.cluster.local"},
			inWeb: allOutbound,
		},
		"a VirtualService it imports brings its destinations": {
			sidecars: sidecarDoc("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n") + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-to-other, namespace: app}
spec:
  hosts: [echo.app.svc.cluster.local]
  http: [{route: [{destination: {host: other.web.svc.cluster.local, port: {number: 80}}}]}]
`,
			sleep: []string{"outbound|5000||echo.app.svc.cluster.local", "outbound|7070||echo.app.svc.cluster.local",
				"outbound|80||echo.app.svc.cluster.local", "outbound|80||other.web.svc.cluster.local", "outbound|80|plain|other.web.svc.cluster.local",
				"outbound|9090||echo.app.svc.cluster.local"},
			inWeb: allOutbound,
		},
		"ALLOW_ANY in a Sidecar overrides a REGISTRY_ONLY mesh": {
			sidecars: sidecarDoc("app", "default", "", "  egress: [{hosts: [\"*/*\"]}]\n  outboundTrafficPolicy: {mode: ALLOW_ANY}\n"),
			sleep:    allOutbound, inWeb: allOutbound, webRegistry: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			snap := modeltest.Load(t, scopeManifests+tc.sidecars)
			gen := g
			if tc.webRegistry {
				gen = &Generator{TrustDomain: td, Mesh: Mesh{RegistryOnly: true}}
			}
			s, w := generate(t, gen, snap, sleep), generate(t, gen, snap, web)
			slices.Sort(tc.sleep)
			slices.Sort(tc.inWeb)
			if got := clusterNames(s); !slices.Equal(got, tc.sleep) {
				t.Errorf("sleep's clusters\n got %q\nwant %q", got, tc.sleep)
			}
			if got := clusterNames(w); !slices.Equal(got, tc.inWeb) {
				t.Errorf("web's clusters\n got %q\nwant %q", got, tc.inWeb)
			}
			for n := range s.endpoints {
				if !slices.Contains(tc.sleep, n) {
					t.Errorf("sleep has the load assignment of %s, which it does not see", n)
				}
			}
			for n := range s.listeners {
				if strings.HasPrefix(n, "10.96.0.11_") || (strings.HasPrefix(n, "10.96.9.1_") && !slices.Contains(tc.sleep, "outbound|15012||istiod.istio-system.svc.cluster.local")) {
					t.Errorf("sleep has listener %s of a service it does not see", n)
				}
			}
			for _, vh := range s.routes["80"].GetVirtualHosts() {
				for _, d := range vh.GetDomains() {
					host, _, _ := strings.Cut(d, ":")
					if strings.HasSuffix(host, ".svc.cluster.local") || strings.HasSuffix(host, ".example.com") {
						if !slices.ContainsFunc(tc.sleep, func(c string) bool { return strings.HasSuffix(c, "|"+host) }) {
							t.Errorf("route 80 of sleep names %s, which it does not see", d)
						}
					}
				}
			}
			if got := catchAllCluster(t, s); (got == blackholeCluster) != tc.registryOnly {
				t.Errorf("sleep's virtualOutbound catch-all: %s, REGISTRY_ONLY %t", got, tc.registryOnly)
			}
			if got := catchAllCluster(t, w); (got == blackholeCluster) != tc.webRegistry {
				t.Errorf("web's virtualOutbound catch-all: %s, REGISTRY_ONLY %t", got, tc.webRegistry)
			}
		})
	}
}

// allOutbound are the outbound clusters of scopeManifests without a
// Sidecar.
var allOutbound = []string{ // sorted by the test
	"outbound|15012||istiod.istio-system.svc.cluster.local", "outbound|5000||echo.app.svc.cluster.local",
	"outbound|7070||echo.app.svc.cluster.local", "outbound|80||api.example.com", "outbound|80||echo.app.svc.cluster.local",
	"outbound|80||other.web.svc.cluster.local", "outbound|80|plain|other.web.svc.cluster.local", "outbound|9090||echo.app.svc.cluster.local",
}

func catchAllCluster(t *testing.T, c config) string {
	t.Helper()
	out := c.listeners["virtualOutbound"]
	tcp := &tcpproxy.TcpProxy{}
	if err := out.FilterChains[len(out.FilterChains)-1].Filters[0].GetTypedConfig().UnmarshalTo(tcp); err != nil {
		t.Fatal(err)
	}
	return tcp.GetCluster()
}

// TestSidecarScopeKeys: proxies one Sidecar configures share their
// resources' keys with each other and not with proxies of another scope,
// and a Sidecar's content is part of the scope.
func TestSidecarScopeKeys(t *testing.T) {
	g := &Generator{TrustDomain: td}
	snap := modeltest.Load(t, scopeManifests+sidecarDoc("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n"))
	a := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{sleepIP}}
	b := &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{"10.0.0.19"}}
	if g.Scope(snap, a) != g.Scope(snap, b) || g.EndpointScope(snap, a) != g.EndpointScope(snap, b) {
		t.Fatal("two replicas under one Sidecar have different scopes")
	}
	for _, typeURL := range []string{resource.ListenerType, resource.ClusterType, resource.RouteType, resource.EndpointType} {
		if !slices.Equal(resourceKeys(g.Generate(snap, a, typeURL, nil, true)), resourceKeys(g.Generate(snap, b, typeURL, nil, true))) {
			t.Errorf("%s: two replicas under one Sidecar do not share resources", typeURL)
		}
	}
	wider := modeltest.Load(t, scopeManifests+sidecarDoc("app", "default", "", "  egress: [{hosts: [\"*/*\"]}]\n"))
	if g.Scope(snap, a) == g.Scope(wider, a) || g.EndpointScope(snap, a) == g.EndpointScope(wider, a) {
		t.Error("a Sidecar's change leaves the scope of the proxies it configures as it was")
	}
	if slices.Equal(resourceKeys(g.Generate(snap, a, resource.RouteType, nil, true)), resourceKeys(g.Generate(wider, a, resource.RouteType, nil, true))) {
		t.Error("routes of two Sidecars share keys")
	}
	web := &Proxy{Namespace: "web", Labels: map[string]string{"app": "other"}, IPs: []string{"10.0.1.5"}}
	if g.Scope(snap, web) != g.Scope(wider, web) {
		t.Error("a Sidecar of another namespace changes web's scope")
	}
}

// TestVirtualServiceDestinationsHaveClustersAlone: a service a Sidecar
// imports only as a VirtualService's destination gets clusters, not a
// virtual host nor listeners, as in Istio.
func TestVirtualServiceDestinationsHaveClustersAlone(t *testing.T) {
	snap := modeltest.Load(t, scopeManifests+sidecarDoc("app", "default", "", "  egress: [{hosts: [\"./*\"]}]\n")+`
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-to-other, namespace: app}
spec:
  hosts: [echo.app.svc.cluster.local]
  http: [{route: [{destination: {host: other.web.svc.cluster.local, port: {number: 80}}}]}]
`)
	c := generate(t, &Generator{TrustDomain: td}, snap, &Proxy{Namespace: "app", Labels: map[string]string{"app": "sleep"}, IPs: []string{sleepIP}})
	if _, ok := c.clusters["outbound|80||other.web.svc.cluster.local"]; !ok {
		t.Fatal("the VirtualService's destination has no cluster")
	}
	for _, vh := range c.routes["80"].GetVirtualHosts() {
		if strings.HasPrefix(vh.GetName(), "other.web.svc.cluster.local") {
			t.Errorf("route 80 has a virtual host for the destination: %s", vh.GetName())
		}
	}
	for n := range c.listeners {
		if strings.HasPrefix(n, "10.96.0.11_") {
			t.Errorf("listener %s of the destination", n)
		}
	}
}
