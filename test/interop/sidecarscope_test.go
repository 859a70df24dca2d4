package interop

import (
	"fmt"
	"testing"

	"istio.io/istio/pilot/pkg/simulation"
	"istio.io/istio/pilot/test/xdstest"
)

// The Sidecar resource's scoping, judged against Istio's generator: the
// same Kubernetes objects (sidecarWorld), the same Sidecars,
// ServiceEntries, VirtualServices and DestinationRules; the same
// resource names (clusters, listeners, routes: which services each proxy
// sees), cluster TLS, endpoints, and Istio's simulator call by call.

func sidecarRes(ns, name, body string) string {
	return "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" + body
}

const (
	extEntryApp = `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: app}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
`
	extEntryOther = `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: partner, namespace: other}
spec:
  hosts: [partner.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
`
)

var appPods = []string{"app/sleep-1", "app/echo-1", "other/backend-1"}

var sidecarScopeScenarios = []entryScenario{{
	sidecarScenario: sidecarScenario{name: "namespace-wide ./* and istio-system/*", pods: appPods,
		istio: sidecarRes("app", "default", "  egress: [{hosts: [\"./*\", \"istio-system/*\"]}]\n")},
	calls: []entryCall{tcpTo("10.96.1.10", 9090, passthrough), httpTo("backend.other.svc.cluster.local", 80, passthrough)},
}, {
	sidecarScenario: sidecarScenario{name: "the root namespace's default Sidecar", pods: appPods,
		istio: sidecarRes("istio-system", "default", "  egress: [{hosts: [\"./*\"]}]\n")},
	calls: []entryCall{httpTo("echo.app.svc.cluster.local", 80, "outbound|80||echo.app.svc.cluster.local")},
}, {
	sidecarScenario: sidecarScenario{name: "a namespace's Sidecar over the root's", pods: appPods,
		istio: sidecarRes("istio-system", "default", "  egress: [{hosts: [\"./*\"]}]\n") +
			sidecarRes("app", "wide", "  egress: [{hosts: [\"*/*\"]}]\n")},
	calls: []entryCall{httpTo("backend.other.svc.cluster.local", 80, "outbound|80||backend.other.svc.cluster.local")},
}, {
	sidecarScenario: sidecarScenario{name: "a workloadSelector picks sleep alone", pods: appPods,
		istio: sidecarRes("app", "sleep", "  workloadSelector: {labels: {app: sleep}}\n  egress: [{hosts: [\"other/*\"]}]\n") +
			sidecarRes("app", "default", "  egress: [{hosts: [\"./*\"]}]\n")},
}, {
	sidecarScenario: sidecarScenario{name: "the oldest of two selecting Sidecars", pods: []string{"app/sleep-1"},
		istio: "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: b-newer, namespace: app, creationTimestamp: \"2026-02-01T00:00:00Z\"}\nspec:\n  workloadSelector: {labels: {app: sleep}}\n  egress: [{hosts: [\"./*\"]}]\n" +
			"---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: a-older, namespace: app, creationTimestamp: \"2026-01-01T00:00:00Z\"}\nspec:\n  workloadSelector: {labels: {app: sleep}}\n  egress: [{hosts: [\"other/*\"]}]\n"},
}, {
	sidecarScenario: sidecarScenario{name: "REGISTRY_ONLY per Sidecar, an entry visible and one hidden", pods: appPods,
		istio: extEntryApp + extEntryOther + sidecarRes("app", "default", "  egress: [{hosts: [\"./*\"]}]\n  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")},
	calls: []entryCall{
		httpTo("api.example.com", 80, "outbound|80||api.example.com"),
		httpTo("partner.example.com", 80, ""),
		tcpTo(unknownIP, undeclaredPort, ""),
	},
}, {
	sidecarScenario: sidecarScenario{name: "ALLOW_ANY per Sidecar under a REGISTRY_ONLY mesh", pods: appPods, registryOnly: true,
		istio: extEntryOther + sidecarRes("app", "default", "  egress: [{hosts: [\"./*\"]}]\n  outboundTrafficPolicy: {mode: ALLOW_ANY}\n")},
	calls: []entryCall{httpTo("partner.example.com", 80, passthrough), tcpTo(unknownIP, undeclaredPort, passthrough)},
}, {
	sidecarScenario: sidecarScenario{name: "a DestinationRule and VirtualService outside the egress hosts", pods: appPods,
		istio: sidecarRes("app", "default", "  egress: [{hosts: [\"./*\"]}]\n") + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: backend, namespace: other}
spec:
  host: backend.other.svc.cluster.local
  trafficPolicy: {tls: {mode: DISABLE}}
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-from-other, namespace: other}
spec:
  hosts: [echo.app.svc.cluster.local]
  http: [{route: [{destination: {host: backend.other.svc.cluster.local, subset: v1, port: {number: 80}}}]}]
`},
	calls: []entryCall{httpTo("echo.app.svc.cluster.local", 80, "outbound|80||echo.app.svc.cluster.local")},
}, {
	sidecarScenario: sidecarScenario{name: "a VirtualService it imports brings its destination", pods: appPods,
		istio: sidecarRes("app", "default", "  egress: [{hosts: [\"./*\"]}]\n") + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-to-backend, namespace: app}
spec:
  hosts: [echo.app.svc.cluster.local]
  http: [{route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 80}}}]}]
`},
	calls: []entryCall{httpTo("echo.app.svc.cluster.local", 80, "outbound|80||backend.other.svc.cluster.local")},
}, {
	sidecarScenario: sidecarScenario{name: "an egress listener of one port", pods: appPods,
		istio: sidecarRes("app", "default", "  egress: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"*/*\"]}, {hosts: [\"istio-system/*\"]}]\n")},
}, {
	sidecarScenario: sidecarScenario{name: "a port listener narrower than the catch-all", pods: appPods,
		istio: sidecarRes("app", "default", "  egress: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"./*\"]}, {hosts: [\"*/*\"]}]\n")},
	calls: []entryCall{httpTo("backend.other.svc.cluster.local", 80, "")},
}, {
	sidecarScenario: sidecarScenario{name: "a TCP port listener narrower than the catch-all", pods: appPods,
		istio: sidecarRes("app", "default", "  egress: [{port: {number: 9090, name: tcp, protocol: TCP}, hosts: [\"./*\"]}, {hosts: [\"*/*\"]}]\n")},
	calls: []entryCall{tcpTo("10.96.1.10", 9090, "")},
}, {
	sidecarScenario: sidecarScenario{name: "exclusions", pods: appPods,
		istio: extEntryOther + sidecarRes("app", "default", "  egress: [{hosts: [\"*/*\", \"~other/*\", \"~/legacy.app.svc.cluster.local\"]}]\n")},
}, {
	sidecarScenario: sidecarScenario{name: "wildcard hosts and exportTo", pods: appPods,
		istio: extEntryOther + extEntryApp + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: private, namespace: other}
spec:
  hosts: [private.example.com]
  exportTo: ["."]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
` + sidecarRes("app", "default", "  egress: [{hosts: [\"*/*.example.com\", \"./echo.app.svc.cluster.local\"]}]\n")},
	calls: []entryCall{httpTo("private.example.com", 80, passthrough)},
}}

// TestSidecarScopeMatchesIstio: for every scenario and pod, the names of
// the clusters, listeners and routes (what the proxy sees), each
// cluster's TLS and endpoints, and Istio's simulator on the mesh's own
// calls and the scenario's, as Istio's generator gives them; and our
// configuration passes Istio's and Envoy's validation (checkConfigValid).
func TestSidecarScopeMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	used := map[int]bool{}
	if len(sidecarScopeScenarios) < 10 {
		t.Fatalf("%d scenarios", len(sidecarScopeScenarios))
	}
	ran, want := 0, 0
	for _, sc := range sidecarScopeScenarios {
		want += len(sc.pods)
		t.Run(sc.name, func(t *testing.T) {
			s := istioServer(t, sc.sidecarScenario)
			ours := ourSide(t, w, sc.sidecarScenario)
			scoped := false
			for _, key := range sc.pods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) {
					proxy := istioProxy(s, pod)
					istioSim := simulation.NewSimulation(t, s, proxy)
					ourSim := *istioSim
					ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours[key].listeners, ours[key].clusters, ours[key].routes
					ran++
					if proxy.SidecarScope != nil && proxy.SidecarScope.Sidecar != nil {
						scoped = true
					}
					d := &differences{t: t, scenario: sc.name, used: used, list: sidecarScopeAllowedDifferences}
					compareResourceNames(d, istioSim, &ourSim)
					compareClusterTLS(d, istioSim, &ourSim)
					compareEndpoints(d, s.Endpoints(proxy), ours[key].endpoints)
					t.Logf("%d clusters (Istio %d)", len(ours[key].clusters), len(xdstest.ExtractClusters(istioSim.Clusters)))
					for _, c := range outboundCalls(w, pod) {
						want, got := simulate(istioSim, c.call), simulate(&ourSim, c.call)
						d.check("call "+c.name, want.String(), got.String(),
							fmt.Sprintf("\n  istio details: %s\n  ours details:  %s", want.details(), got.details()))
					}
					for _, c := range sc.calls {
						if c.call.CallMode == "" {
							c.call.CallMode = simulation.CallModeOutbound
						}
						want, got := simulate(istioSim, c.call), simulate(&ourSim, c.call)
						d.check("call "+c.name, want.String(), got.String(),
							fmt.Sprintf("\n  istio details: %s\n  ours details:  %s", want.details(), got.details()))
						if pod.Namespace == "app" && c.want != "" && (want.Cluster != c.want || got.Cluster != c.want) {
							t.Errorf("call %s: clusters istio %q, ours %q, want %q", c.name, want.Cluster, got.Cluster, c.want)
						}
					}
					d.logAllowed()
					// What Envoy would refuse, or wait on forever.
					checkConfigValid(t, ours[key])
				})
			}
			if !scoped {
				t.Error("no pod of the scenario has a Sidecar in Istio's eyes: the scenario tests nothing")
			}
		})
	}
	if ran == want {
		for i, a := range sidecarScopeAllowedDifferences {
			if !used[i] {
				t.Errorf("allowed difference %d (%s) no longer occurs; delete it", i, a.reason)
			}
		}
	}
}

// sidecarScopeAllowedDifferences are the intended differences of the
// Sidecar scenarios.
var sidecarScopeAllowedDifferences = []allowedDifference{}
