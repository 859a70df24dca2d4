package envoygen

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// rulesBase: services of namespaces a and b (an HTTP and a TCP port
// each), a service whose port's protocol is sniffed, an entry for
// api.example.com (TLS) and ext.example.com (HTTP), a Sidecar scoping
// b's proxies labelled scope=narrow to their namespace and svc-a1, and
// the Gateway b/ingress of the routers labelled istio=ingressgateway.
var rulesBase = func() string {
	var b strings.Builder
	for i := range 4 {
		for _, ns := range []string{"a", "b"} {
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: svc-%s%d, namespace: %s}\nspec:\n  clusterIP: 10.96.%d.%d\n  selector: {app: svc-%s%d}\n  ports: [{name: http, port: 80, targetPort: 8080}, {name: tcp, port: 9000}]\n",
				ns, i, ns, map[string]int{"a": 1, "b": 2}[ns], i+1, ns, i)
		}
	}
	return b.String() + `---
apiVersion: v1
kind: Service
metadata: {name: sniffed, namespace: a}
spec:
  clusterIP: 10.96.3.1
  selector: {app: sniffed}
  ports: [{name: web, port: 8000}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: a}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{number: 443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: b}
spec:
  hosts: [ext.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 80, name: http, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: scoped, namespace: b}
spec:
  workloadSelector: {labels: {scope: narrow}}
  egress: [{hosts: ["./*", "a/svc-a1.a.svc.cluster.local"]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: b}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ["*"]}]
`
}()

func vsOf(name, ns, spec string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" + spec
}

func drOf(name, ns, spec string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" + spec
}

// ruleChangeCases are rule changes, as the manifests before and after
// (besides rulesBase).
var ruleChangeCases = map[string]struct{ before, after string }{
	"an http VirtualService added": {"", vsOf("r", "a", "  hosts: [svc-a0]\n  http: [{timeout: 2s, route: [{destination: {host: svc-a0}}]}]\n")},
	"exported to its namespace alone": {
		vsOf("r", "a", "  hosts: [svc-a0]\n  http: [{timeout: 2s, route: [{destination: {host: svc-a0}}]}]\n"),
		vsOf("r", "a", "  hosts: [svc-a0]\n  exportTo: [\".\"]\n  http: [{timeout: 2s, route: [{destination: {host: svc-a0}}]}]\n"),
	},
	"a rule for clients by their labels": {
		vsOf("r", "b", "  hosts: [svc-a0.a.svc.cluster.local]\n  http: [{match: [{sourceLabels: {version: v1}}], route: [{destination: {host: svc-a0.a.svc.cluster.local}}]}, {route: [{destination: {host: svc-a1.a.svc.cluster.local}}]}]\n"),
		vsOf("r", "b", "  hosts: [svc-a0.a.svc.cluster.local]\n  http: [{match: [{sourceLabels: {version: v1}}], route: [{destination: {host: svc-a2.a.svc.cluster.local}}]}, {route: [{destination: {host: svc-a1.a.svc.cluster.local}}]}]\n"),
	},
	"a delegate's rules": {
		vsOf("root", "a", "  hosts: [svc-a2]\n  http: [{match: [{uri: {prefix: /api}}], delegate: {name: del, namespace: b}}]\n") +
			vsOf("del", "b", "  http: [{match: [{uri: {prefix: /api/v1}}], route: [{destination: {host: svc-b0}}]}]\n"),
		vsOf("root", "a", "  hosts: [svc-a2]\n  http: [{match: [{uri: {prefix: /api}}], delegate: {name: del, namespace: b}}]\n") +
			vsOf("del", "b", "  http: [{match: [{uri: {prefix: /api/v1}}], route: [{destination: {host: svc-b3}}]}]\n"),
	},
	"a delegate no longer exported to its root": {
		vsOf("root", "a", "  hosts: [svc-a2]\n  http: [{match: [{uri: {prefix: /api}}], delegate: {name: del, namespace: b}}]\n") +
			vsOf("del", "b", "  http: [{match: [{uri: {prefix: /api/v1}}], route: [{destination: {host: svc-b0}}]}]\n"),
		vsOf("root", "a", "  hosts: [svc-a2]\n  http: [{match: [{uri: {prefix: /api}}], delegate: {name: del, namespace: b}}]\n") +
			vsOf("del", "b", "  exportTo: [b]\n  http: [{match: [{uri: {prefix: /api/v1}}], route: [{destination: {host: svc-b0}}]}]\n"),
	},
	"tcp routes split":  {"", vsOf("t", "b", "  hosts: [svc-b1]\n  tcp: [{match: [{port: 9000}], route: [{destination: {host: svc-b1, port: {number: 9000}}, weight: 50}, {destination: {host: svc-a3.a.svc.cluster.local, port: {number: 9000}}, weight: 50}]}]\n")},
	"tls routes by SNI": {"", vsOf("s", "a", "  hosts: [api.example.com]\n  tls: [{match: [{port: 443, sniHosts: [api.example.com]}], route: [{destination: {host: svc-b2.b.svc.cluster.local, port: {number: 9000}}}]}]\n")},
	"a wildcard host":   {"", vsOf("w", "b", "  hosts: [\"*.a.svc.cluster.local\"]\n  http: [{retries: {attempts: 4}, route: [{destination: {host: svc-b0}}]}]\n")},
	"its host moved": {
		vsOf("r", "a", "  hosts: [svc-a0]\n  http: [{route: [{destination: {host: svc-a0}}]}]\n"),
		vsOf("r", "a", "  hosts: [svc-a1]\n  http: [{route: [{destination: {host: svc-a1}}]}]\n"),
	},
	"a destination a Sidecar imports for it": {"", vsOf("d", "b", "  hosts: [svc-b1]\n  http: [{route: [{destination: {host: svc-a3.a.svc.cluster.local}}]}]\n")},
	"bound to a gateway alone": {
		vsOf("g", "a", "  hosts: [svc-a0]\n  http: [{route: [{destination: {host: svc-a1}}]}]\n"),
		vsOf("g", "a", "  hosts: [svc-a0]\n  gateways: [gw]\n  http: [{route: [{destination: {host: svc-a1}}]}]\n"),
	},
	"bound to the router's Gateway": {"", vsOf("i", "b", "  hosts: [shop.example.com]\n  gateways: [ingress]\n  http: [{timeout: 2s, route: [{destination: {host: svc-b0}}]}]\n")},
	"a rule of a host the router's Gateway routes to": {
		vsOf("i", "b", "  hosts: [shop.example.com]\n  gateways: [ingress]\n  http: [{route: [{destination: {host: svc-a1.a.svc.cluster.local}}]}]\n"),
		vsOf("i", "b", "  hosts: [shop.example.com]\n  gateways: [ingress]\n  http: [{route: [{destination: {host: svc-a1.a.svc.cluster.local}}]}]\n") +
			drOf("h", "a", "  host: svc-a1\n  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}\n"),
	},
	"a port whose protocol is sniffed": {"", vsOf("p", "a", "  hosts: [sniffed]\n  http: [{timeout: 1s, route: [{destination: {host: svc-a1}}]}]\n")},
	"a host that is no service":        {"", vsOf("x", "a", "  hosts: [www.example.org]\n  http: [{route: [{destination: {host: svc-a0}}]}]\n")},
	"an entry's host":                  {"", vsOf("e", "b", "  hosts: [ext.example.com]\n  http: [{timeout: 1s, route: [{destination: {host: ext.example.com}}]}]\n")},
	"subsets added":                    {"", drOf("r", "a", "  host: svc-a0\n  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n")},
	"subsets a route uses": {
		drOf("r", "a", "  host: svc-a0\n  subsets: [{name: v1, labels: {version: v1}}]\n") +
			vsOf("r", "b", "  hosts: [svc-b0]\n  http: [{route: [{destination: {host: svc-a0.a.svc.cluster.local, subset: v1}}]}]\n"),
		drOf("r", "a", "  host: svc-a0\n  subsets: [{name: v1, labels: {version: v1}, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x}}}}]\n") +
			vsOf("r", "b", "  hosts: [svc-b0]\n  http: [{route: [{destination: {host: svc-a0.a.svc.cluster.local, subset: v1}}]}]\n"),
	},
	"a wildcard rule of the root namespace": {"", drOf("w", "istio-system", "  host: \"*.b.svc.cluster.local\"\n  trafficPolicy: {tls: {mode: DISABLE}}\n")},
	"exported to one namespace": {
		drOf("r", "b", "  host: svc-b1\n  trafficPolicy: {tls: {mode: DISABLE}}\n"),
		drOf("r", "b", "  host: svc-b1\n  exportTo: [a]\n  trafficPolicy: {tls: {mode: DISABLE}}\n"),
	},
	"a consistent hash":             {"", drOf("h", "a", "  host: svc-a1\n  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}\n")},
	"for workloads by their labels": {"", drOf("s", "b", "  host: svc-b2\n  workloadSelector: {matchLabels: {version: v1}}\n  trafficPolicy: {tls: {mode: DISABLE}}\n")},
	"TLS origination to an entry":   {"", drOf("o", "b", "  host: ext.example.com\n  trafficPolicy: {portLevelSettings: [{port: {number: 80}, tls: {mode: SIMPLE}}]}\n")},
	// A service's rule sets its own workloads' inbound clusters too.
	"a connection pool":     {"", drOf("p", "a", "  host: svc-a0\n  trafficPolicy: {connectionPool: {tcp: {maxConnections: 10}, http: {h2UpgradePolicy: UPGRADE, maxRequestsPerConnection: 5}}}\n")},
	"the client's protocol": {"", drOf("c", "a", "  host: svc-a0\n  trafficPolicy: {connectionPool: {http: {useClientProtocol: true}}}\n")},
}

// TestRuleReadersNameWhatChanges: for each rule change and each proxy
// (sidecars of both namespaces, by their labels, one under a Sidecar, and
// a router), every resource whose content differs after the change,
// added or gone, is of a proxy that SeesRules, and is named by the
// readers (ChangedRules' Names); of a router, a listener or route that
// differs is of one that RouterSeesRules (which regenerates them in
// full). Otherwise an incremental push would leave it stale. A router
// must also be spared some changes, or the narrowing is not tested.
func TestRuleReadersNameWhatChanges(t *testing.T) {
	proxies := map[string]*Proxy{
		"a v1":     {Namespace: "a", Labels: map[string]string{"app": "svc-a0", "version": "v1"}, IPs: []string{"10.0.1.1"}},
		"a v2":     {Namespace: "a", Labels: map[string]string{"app": "svc-a1", "version": "v2"}, IPs: []string{"10.0.1.2"}},
		"b v1":     {Namespace: "b", Labels: map[string]string{"app": "svc-b0", "version": "v1"}, IPs: []string{"10.0.2.1"}},
		"b scoped": {Namespace: "b", Labels: map[string]string{"app": "svc-b3", "scope": "narrow"}, IPs: []string{"10.0.2.4"}},
		"router":   {Namespace: "b", Labels: map[string]string{"istio": "ingressgateway"}, Router: true},
	}
	types := []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}
	tested, spared, routed := 0, 0, 0
	for name, tc := range ruleChangeCases {
		t.Run(name, func(t *testing.T) {
			before, after := modeltest.Load(t, rulesBase+tc.before), modeltest.Load(t, rulesBase+tc.after)
			d := model.Diff(before, after)
			if d.Config || len(d.VirtualServices)+len(d.DestinationRules) == 0 {
				t.Fatalf("not a rule change: %+v", d)
			}
			r := ChangedRules(before, after, d)
			g := &Generator{TrustDomain: td}
			for pname, p := range proxies {
				routerChanged := false
				for _, typeURL := range types {
					changed := changedNames(t, g, before, after, p, typeURL)
					if len(changed) == 0 {
						continue
					}
					tested++
					if p.Router && (typeURL == resource.ListenerType || typeURL == resource.RouteType) {
						routerChanged = true
						routed++
						if !g.RouterSeesRules(after, p, r) {
							t.Errorf("%s: %s changed (%v), but its Gateways do not read the rules", pname, shortTypeName(typeURL), changed)
						}
						continue // generated in full
					}
					if !g.SeesRules(after, p, r) {
						t.Errorf("%s: %s changed (%v), but it does not see the rules", pname, shortTypeName(typeURL), changed)
						continue
					}
					for _, n := range changed {
						if !r.Names(typeURL)[n] {
							t.Errorf("%s: %s %s changed, not named by the readers", pname, shortTypeName(typeURL), n)
						}
					}
				}
				if p.Router && !routerChanged && !g.RouterSeesRules(after, p, r) {
					spared++
				}
			}
		})
	}
	if tested == 0 || routed == 0 || spared == 0 {
		t.Errorf("%d changes, %d of a router's listeners or routes, %d routers spared: the cases test too little", tested, routed, spared)
	}
}

// changedNames are the names of typeURL whose resource for p differs
// between before and after, or exists in one alone.
func changedNames(t *testing.T, g *Generator, before, after *model.Snapshot, p *Proxy, typeURL string) []string {
	t.Helper()
	gen := func(snap *model.Snapshot) map[string]string {
		out := map[string]string{}
		for _, r := range g.Generate(snap, p, typeURL, nil, true) {
			raw, err := r.Marshal()
			if err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
			out[r.Name] = string(raw)
		}
		return out
	}
	b, a := gen(before), gen(after)
	var out []string
	for n, raw := range b {
		if a[n] != raw {
			out = append(out, n)
		}
	}
	for n := range a {
		if _, ok := b[n]; !ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func shortTypeName(typeURL string) string { return typeURL[strings.LastIndex(typeURL, ".")+1:] }
