package interop

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"istio.io/istio/pilot/test/xdstest"
	corev1 "k8s.io/api/core/v1"

	"istio.io/istio/pilot/pkg/simulation"
)

// entryScenario is a sidecar scenario with ServiceEntries, and the
// connections that reach their hosts.
type entryScenario struct {
	sidecarScenario
	calls []entryCall
}

// entryCall is an outbound connection of the client and, where the
// scenario is about it, the cluster both generators must pick: the two
// agreeing on a wrong cluster fails too.
type entryCall struct {
	name string
	call simulation.Call
	want string // "" when only agreement is checked
}

func httpTo(host string, port int, want string) entryCall {
	return entryCall{
		name: fmt.Sprintf("http to %s:%d Host %s", unknownIP, port, host),
		call: simulation.Call{Address: unknownIP, Port: port, Protocol: simulation.HTTP, HostHeader: host},
		want: want,
	}
}

func tlsTo(addr string, port int, sni, want string) entryCall {
	return entryCall{
		name: fmt.Sprintf("TLS to %s:%d SNI %s", addr, port, sni),
		call: simulation.Call{Address: addr, Port: port, Protocol: simulation.TCP, TLS: simulation.TLS, Sni: sni},
		want: want,
	}
}

func tcpTo(addr string, port int, want string) entryCall {
	return entryCall{
		name: fmt.Sprintf("TCP to %s:%d", addr, port),
		call: simulation.Call{Address: addr, Port: port, Protocol: simulation.TCP},
		want: want,
	}
}

const (
	blackHole   = "BlackHoleCluster"
	passthrough = "PassthroughCluster"
)

// entry is a ServiceEntry of namespace app named name with spec.
func entry(name, spec string) string {
	return fmt.Sprintf("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: app}\nspec:\n%s", name, spec)
}

const (
	apiEntryDNS = `  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
`
	tlsEntriesDNS = `  hosts: [secure.example.com, pay.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tls, number: 443, protocol: TLS}]
`
	dbEntryStatic = `  hosts: [db.example.com]
  addresses: [240.240.0.1]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: tcp-pg, number: 5432, protocol: TCP}]
  endpoints: [{address: 192.0.2.21}, {address: 192.0.2.22}]
`
)

// sleepOnly is the client of the entries' scenarios.
var sleepOnly = []string{"app/sleep-1"}

// entryScenarios are ServiceEntries and mesh outboundTrafficPolicy
// REGISTRY_ONLY as Istio's generator and ours make them.
var entryScenarios = []entryScenario{{
	sidecarScenario: sidecarScenario{name: "DNS MESH_EXTERNAL HTTP host", istio: entry("api", apiEntryDNS), pods: sleepOnly},
	calls: []entryCall{
		httpTo("api.example.com", 80, "outbound|80||api.example.com"),
		httpTo("api.example.com:80", 80, "outbound|80||api.example.com"),
		httpTo(unknownHostName, 80, passthrough),
	},
}, {
	sidecarScenario: sidecarScenario{name: "DNS entry with endpoints and a target port", pods: sleepOnly, istio: entry("ext", `  hosts: [ext.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 8080, protocol: HTTP, targetPort: 80}]
  endpoints: [{address: a.example.net}, {address: 192.0.2.11, ports: {http: 8081}}]
`)},
	calls: []entryCall{httpTo("ext.example.com", 8080, "outbound|8080||ext.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "DNS_ROUND_ROBIN entry", pods: sleepOnly, istio: entry("rr", `  hosts: [rr.example.com]
  location: MESH_EXTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: first.example.net, ports: {http: 8080}}]
`)},
	calls: []entryCall{httpTo("rr.example.com", 80, "outbound|80||rr.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "TLS entries without addresses chosen by SNI", istio: entry("tls", tlsEntriesDNS), pods: sleepOnly},
	calls: []entryCall{
		tlsTo(unknownIP, 443, "secure.example.com", "outbound|443||secure.example.com"),
		tlsTo(unknownIP, 443, "pay.example.com", "outbound|443||pay.example.com"),
		tlsTo(unknownIP, 443, unknownHostName, passthrough),
		tcpTo(unknownIP, 443, passthrough),
	},
}, {
	sidecarScenario: sidecarScenario{name: "HTTPS entry without address, DNS_ROUND_ROBIN", pods: sleepOnly, istio: entry("https", `  hosts: [www.example.org]
  location: MESH_EXTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{name: https, number: 8443, protocol: HTTPS}]
`)},
	calls: []entryCall{tlsTo(unknownIP, 8443, "www.example.org", "outbound|8443||www.example.org")},
}, {
	sidecarScenario: sidecarScenario{name: "STATIC entry with an address, TCP", istio: entry("db", dbEntryStatic), pods: sleepOnly},
	calls: []entryCall{
		tcpTo("240.240.0.1", 5432, "outbound|5432||db.example.com"),
		tcpTo(unknownIP, 5432, passthrough),
	},
}, {
	sidecarScenario: sidecarScenario{name: "NONE wildcard TLS entry", pods: sleepOnly, istio: entry("wild", `  hosts: ["*.wild.example.com"]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{name: tls, number: 9443, protocol: TLS}]
`)},
	calls: []entryCall{tlsTo(unknownIP, 9443, "a.wild.example.com", "outbound|9443||*.wild.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "NONE TCP entry without address, with a target port", pods: sleepOnly, istio: entry("raw", `  hosts: [raw.example.com]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{name: tcp, number: 6000, protocol: TCP, targetPort: 6001}]
`)},
	calls: []entryCall{tcpTo(unknownIP, 6000, "outbound|6000||raw.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "NONE MESH_INTERNAL entry with an address", pods: sleepOnly, istio: entry("vip", `  hosts: [vip.internal]
  addresses: [240.240.0.9]
  location: MESH_INTERNAL
  resolution: NONE
  ports: [{name: tcp, number: 7100, protocol: TCP}]
`)},
	calls: []entryCall{tcpTo("240.240.0.9", 7100, "outbound|7100||vip.internal")},
}, {
	sidecarScenario: sidecarScenario{name: "MESH_INTERNAL STATIC entry: auto-mTLS to endpoints with a sidecar, SANs", pods: sleepOnly, istio: entry("vms", `  hosts: [vm.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  subjectAltNames: [spiffe://cluster.local/ns/app/sa/vm-extra]
  ports: [{name: http, number: 80, protocol: HTTP}, {name: tcp-db, number: 5433, protocol: TCP}]
  addresses: [240.240.0.5]
  endpoints:
  - {address: 10.3.0.1, serviceAccount: vm}
  - {address: 10.3.0.2, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.3.0.3}
`)},
	calls: []entryCall{
		httpTo("vm.internal", 80, "outbound|80||vm.internal"),
		tcpTo("240.240.0.5", 5433, "outbound|5433||vm.internal"),
		tlsTo("240.240.0.5", 5433, "vm.internal", "outbound|5433||vm.internal"),
	},
}, {
	sidecarScenario: sidecarScenario{name: "MESH_INTERNAL DNS entry with a sidecar endpoint", pods: sleepOnly, istio: entry("mesh-dns", `  hosts: [meshdns.internal]
  location: MESH_INTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: vm1.meshdns.internal, serviceAccount: vm}, {address: vm2.meshdns.internal}]
`)},
	calls: []entryCall{httpTo("meshdns.internal", 80, "outbound|80||meshdns.internal")},
}, {
	sidecarScenario: sidecarScenario{name: "MESH_EXTERNAL STATIC entry: no auto-mTLS even to a sidecar endpoint", pods: sleepOnly, istio: entry("ext-static", `  hosts: [static.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.30, serviceAccount: ext, labels: {security.istio.io/tlsMode: istio}}]
`)},
	calls: []entryCall{httpTo("static.example.com", 80, "outbound|80||static.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "workloadSelector entry selecting pods", pods: []string{"app/sleep-1", "app/echo-1"}, istio: entry("echo-vms", `  hosts: [echo.vms.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: http, number: 8088, protocol: HTTP, targetPort: 8080}, {name: tcp-extra, number: 9999, protocol: TCP, targetPort: 9998}]
  addresses: [240.240.0.77]
  workloadSelector: {labels: {app: echo}}
`)},
	calls: []entryCall{
		httpTo("echo.vms.internal", 8088, "outbound|8088||echo.vms.internal"),
		tcpTo("240.240.0.77", 9999, "outbound|9999||echo.vms.internal"),
		// The selected pod serves the entry's target ports.
		{name: "inbound mTLS TCP to 10.0.0.5:9998", call: simulation.Call{CallMode: simulation.CallModeInbound, Address: "10.0.0.5", Port: 9998,
			Protocol: simulation.TCP, TLS: simulation.MTLS, Alpn: "istio"}},
		{name: "inbound TCP to 10.0.0.5:9998", call: simulation.Call{CallMode: simulation.CallModeInbound, Address: "10.0.0.5", Port: 9998,
			Protocol: simulation.TCP}},
	},
}, {
	sidecarScenario: sidecarScenario{name: "DestinationRule SIMPLE TLS origination to a DNS entry", pods: sleepOnly, istio: entry("api", apiEntryDNS) + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: app}
spec:
  host: api.example.com
  trafficPolicy:
    tls: {mode: SIMPLE, sni: api.example.com, caCertificates: /etc/certs/ca.pem, subjectAltNames: [api.example.com]}
`},
	calls: []entryCall{httpTo("api.example.com", 80, "outbound|80||api.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "DestinationRule ISTIO_MUTUAL to a MESH_EXTERNAL entry", pods: sleepOnly, istio: entry("db", dbEntryStatic) + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: app}
spec:
  host: db.example.com
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
`},
	calls: []entryCall{tcpTo("240.240.0.1", 5432, "outbound|5432||db.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "REGISTRY_ONLY allows an HTTP entry and blocks unknown hosts", registryOnly: true, pods: sleepOnly,
		istio: entry("api", apiEntryDNS)},
	calls: []entryCall{
		httpTo("api.example.com", 80, "outbound|80||api.example.com"),
		httpTo(unknownHostName, 80, ""),
		httpTo(unknownHostName, undeclaredPort, blackHole),
		tcpTo(unknownIP, 80, blackHole),
	},
}, {
	sidecarScenario: sidecarScenario{name: "REGISTRY_ONLY allows TLS entries by SNI and blocks unknown names", registryOnly: true, pods: sleepOnly,
		istio: entry("tls", tlsEntriesDNS)},
	calls: []entryCall{
		tlsTo(unknownIP, 443, "secure.example.com", "outbound|443||secure.example.com"),
		tlsTo(unknownIP, 443, unknownHostName, blackHole),
		tlsTo(unknownIP, undeclaredPort, unknownHostName, blackHole),
	},
}, {
	sidecarScenario: sidecarScenario{name: "REGISTRY_ONLY allows a TCP entry's address and blocks others", registryOnly: true, pods: sleepOnly,
		istio: entry("db", dbEntryStatic)},
	calls: []entryCall{
		tcpTo("240.240.0.1", 5432, "outbound|5432||db.example.com"),
		tcpTo(unknownIP, 5432, blackHole),
		tcpTo(unknownIP, undeclaredPort, blackHole),
	},
}, {
	sidecarScenario: sidecarScenario{name: "exportTo . keeps an entry from other namespaces", pods: []string{"app/sleep-1", "other/backend-1"},
		istio: entry("private", `  hosts: [private.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  exportTo: ["."]
  ports: [{name: http, number: 80, protocol: HTTP}, {name: tls, number: 443, protocol: TLS}]
`)},
	calls: []entryCall{httpTo("private.example.com", 80, ""), tlsTo(unknownIP, 443, "private.example.com", "")},
}, {
	sidecarScenario: sidecarScenario{name: "exportTo a namespace, under REGISTRY_ONLY", registryOnly: true, pods: []string{"app/sleep-1", "other/backend-1"},
		istio: entry("partner", `  hosts: [partner.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  exportTo: [other]
  ports: [{name: http, number: 80, protocol: HTTP}]
`)},
	calls: []entryCall{httpTo("partner.example.com", 80, "")},
}, {
	sidecarScenario: sidecarScenario{name: "mesh defaultServiceExportTo . and an entry without exportTo", defaultServiceExportTo: []string{"."},
		pods: []string{"app/sleep-1", "other/backend-1"}, istio: entry("api", apiEntryDNS) + entry("tls", tlsEntriesDNS)},
	calls: []entryCall{httpTo("api.example.com", 80, ""), tlsTo(unknownIP, 443, "secure.example.com", "")},
}, {
	sidecarScenario: sidecarScenario{name: "TCP entry without address on an HTTP port", pods: sleepOnly, istio: entry("tcp80", `  hosts: [tcp80.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tcp, number: 80, protocol: TCP}]
`)},
	calls: []entryCall{tcpTo(unknownIP, 80, "outbound|80||tcp80.example.com"), httpTo(unknownHostName, 80, passthrough)},
}, {
	sidecarScenario: sidecarScenario{name: "HTTP entry with an address", pods: sleepOnly, istio: entry("httpvip", `  hosts: [httpvip.example.com]
  addresses: [240.240.1.1]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 8081, protocol: HTTP}]
`)},
	calls: []entryCall{
		httpTo("httpvip.example.com", 8081, "outbound|8081||httpvip.example.com"),
		{name: "http to 240.240.1.1:8081 Host 240.240.1.1", call: simulation.Call{Address: "240.240.1.1", Port: 8081, Protocol: simulation.HTTP, HostHeader: "240.240.1.1"},
			want: "outbound|8081||httpvip.example.com"},
	},
}, {
	sidecarScenario: sidecarScenario{name: "undeclared protocol entry without address", pods: sleepOnly, istio: entry("sniff", `  hosts: [sniff.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: something, number: 7777}]
`)},
	calls: []entryCall{
		tcpTo(unknownIP, 7777, "outbound|7777||sniff.example.com"),
		httpTo("sniff.example.com", 7777, "outbound|7777||sniff.example.com"),
		httpTo(unknownHostName, 7777, passthrough),
	},
}, {
	sidecarScenario: sidecarScenario{name: "entry for a Kubernetes service's host", pods: sleepOnly, istio: entry("shadow", `  hosts: [echo.app.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
`)},
	calls: []entryCall{httpTo("echo.app.svc.cluster.local", 80, "outbound|80||echo.app.svc.cluster.local")},
}, {
	sidecarScenario: sidecarScenario{name: "one host in two namespaces", pods: []string{"app/sleep-1", "other/backend-1"},
		istio: entry("dup", `  hosts: [dup.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.51}]
`) + "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: dup, namespace: other}\nspec:\n" + `  hosts: [dup.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.52}]
`},
	calls: []entryCall{httpTo("dup.example.com", 80, "outbound|80||dup.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "one host in two namespaces without clients: the oldest public one, else the one exported by name",
		pods: []string{"app/sleep-1", "other/backend-1"},
		istio: entryIn("third", "dup", "2026-01-01T00:05:00Z", `  hosts: [dup.example.com]
  exportTo: [app]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: tcp, number: 7000, protocol: TCP}]
  addresses: [240.240.3.1]
  endpoints: [{address: 192.0.2.53}]
`) + entryIn("fourth", "dup", "2026-01-01T00:01:00Z", `  hosts: [dup.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: tcp, number: 7000, protocol: TCP}]
  addresses: [240.240.3.2]
  endpoints: [{address: 192.0.2.54}]
`) + entryIn("fifth", "dup", "2026-01-01T00:00:00Z", `  hosts: [dup.example.com]
  exportTo: [fifth]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: tcp, number: 7000, protocol: TCP}]
  endpoints: [{address: 192.0.2.55}]
`)},
	calls: []entryCall{tcpTo("240.240.3.1", 7000, ""), tcpTo("240.240.3.2", 7000, "")},
}, {
	sidecarScenario: sidecarScenario{name: "one host in two namespaces, DNS, each namespace's own", pods: []string{"app/sleep-1", "other/backend-1"},
		istio: entryIn("app", "dup", "2026-01-01T00:05:00Z", `  hosts: [dns.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tls, number: 443, protocol: TLS}]
  endpoints: [{address: a.example.net}]
`) + entryIn("other", "dup", "2026-01-01T00:00:00Z", `  hosts: [dns.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tls, number: 443, protocol: TLS}, {name: http, number: 8080, protocol: HTTP}]
  endpoints: [{address: b.example.net}]
`)},
	calls: []entryCall{tlsTo(unknownIP, 443, "dns.example.com", "outbound|443||dns.example.com"), httpTo("dns.example.com", 8080, "")},
}, {
	sidecarScenario: sidecarScenario{name: "entry of another namespace for a Kubernetes service's host", pods: []string{"app/sleep-1", "other/backend-1"},
		istio: entryIn("other", "shadow", "2026-01-01T00:00:00Z", `  hosts: [echo.app.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: tcp-db, number: 9090, protocol: TCP}]
  endpoints: [{address: 192.0.2.61}]
`)},
	calls: []entryCall{tcpTo("10.96.0.10", 9090, "outbound|9090||echo.app.svc.cluster.local")},
}, {
	sidecarScenario: sidecarScenario{name: "VirtualService splitting an entry host between two entries", pods: sleepOnly,
		istio: entry("api", apiEntryDNS) + entry("api-v2", `  hosts: [api-v2.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
`) + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: app}
spec:
  hosts: [api.example.com]
  http:
  - match: [{uri: {prefix: /v2}}]
    route: [{destination: {host: api-v2.example.com}}]
    timeout: 3s
  - route: [{destination: {host: api.example.com}}]
`},
	calls: []entryCall{
		{name: "http to api.example.com/v2", call: simulation.Call{Address: unknownIP, Port: 80, Protocol: simulation.HTTP, HostHeader: "api.example.com", Path: "/v2/x"},
			want: "outbound|80||api-v2.example.com"},
		httpTo("api.example.com", 80, "outbound|80||api.example.com"),
	},
}, {
	sidecarScenario: sidecarScenario{name: "two entries of one namespace for one host: their ports merged", pods: []string{"app/sleep-1", "other/backend-1"},
		istio: entryIn("app", "merge-a", "2026-01-01T00:00:00Z", `  hosts: [merge.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.71}]
`) + entryIn("app", "merge-b", "2026-01-01T00:05:00Z", `  hosts: [merge.example.com]
  location: MESH_EXTERNAL
  resolution: STATIC
  ports: [{name: http-alt, number: 8080, protocol: HTTP}, {name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 192.0.2.72}]
`)},
	calls: []entryCall{httpTo("merge.example.com", 80, "outbound|80||merge.example.com"), httpTo("merge.example.com", 8080, "outbound|8080||merge.example.com")},
}, {
	sidecarScenario: sidecarScenario{name: "two DNS entries of one namespace for one host, TCP and TLS ports", pods: []string{"app/sleep-1"},
		istio: entryIn("app", "dns-a", "2026-01-01T00:00:00Z", `  hosts: [mdns.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tls, number: 443, protocol: TLS}]
`) + entryIn("app", "dns-b", "2026-01-01T00:05:00Z", `  hosts: [mdns.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tcp, number: 7001, protocol: TCP}, {name: tls, number: 443, protocol: TLS}]
  endpoints: [{address: b.example.net}]
`)},
	calls: []entryCall{tlsTo(unknownIP, 443, "mdns.example.com", "outbound|443||mdns.example.com"), tcpTo(unknownIP, 7001, "outbound|7001||mdns.example.com")},
}}

// TestSidecarServiceEntrySimulation is TestSidecarSimulation for
// ServiceEntries and REGISTRY_ONLY: Istio's simulator on Istio's
// generator's configuration and on ours for the same objects, call by
// call (the mesh's own calls and each scenario's calls to the entries'
// hosts, some of which must reach a named cluster on both sides), and
// the names of the resources, each cluster's type and upstream TLS (its
// SANs and SNI among it, compareClusterTLS), and the endpoints and their
// auto-mTLS marks, compared.
func TestSidecarServiceEntrySimulation(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	used := map[int]bool{}
	if len(entryScenarios) < 15 {
		t.Fatalf("%d scenarios", len(entryScenarios))
	}
	ran, want := 0, 0
	for _, sc := range entryScenarios {
		want += len(sc.pods)
		t.Run(sc.name, func(t *testing.T) {
			s := istioServer(t, sc.sidecarScenario)
			ours := ourSide(t, w, sc.sidecarScenario)
			for _, key := range sc.pods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) {
					proxy := istioProxy(s, pod)
					istioSim := simulation.NewSimulation(t, s, proxy)
					ourSim := *istioSim
					ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours[key].listeners, ours[key].clusters, ours[key].routes
					ran++
					d := &differences{t: t, scenario: sc.name, used: used, list: entryAllowedDifferences}
					compareResourceNames(d, istioSim, &ourSim)
					compareClusterTLS(d, istioSim, &ourSim)
					compareEntryClusters(d, istioSim, &ourSim)
					compareEndpoints(d, s.Endpoints(proxy), ours[key].endpoints)
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
						if c.want != "" && (want.Cluster != c.want || got.Cluster != c.want) {
							t.Errorf("call %s: clusters istio %q, ours %q, want %q", c.name, want.Cluster, got.Cluster, c.want)
						}
					}
					d.logAllowed()
				})
			}
		})
	}
	if ran == want {
		for i, a := range entryAllowedDifferences {
			if !used[i] {
				t.Errorf("allowed difference %d (%s) no longer occurs; delete it", i, a.reason)
			}
		}
	}
}

// entryAllowedDifferences are the intended differences of the entries'
// scenarios.
var entryAllowedDifferences = []allowedDifference{{
	scenario: regexp.MustCompile(`^entry for a Kubernetes service's host$`),
	subject:  regexp.MustCompile(`^call outbound http to 10\.96\.0\.10:80 Host 10\.96\.0\.10(:80)?$`),
	istio:    `ok, listener "0.0.0.0_80", chain plaintext/HTTP, cluster "PassthroughCluster"`,
	ours:     `ok, listener "0.0.0.0_80", chain plaintext/HTTP, cluster "outbound|80||echo.app.svc.cluster.local"`,
	reason: "a ServiceEntry of the Service's own namespace for its hostname: both keep the Service's cluster, endpoints " +
		"and listeners, but Istio's virtual host of the port then drops the Service's cluster IP from its domains; " +
		"Bulwark leaves the hostname to the Service whole (and reports the entry's host as taken)",
}}

// entryIn is a ServiceEntry of namespace ns named name, created at created.
func entryIn(ns, name, created, spec string) string {
	return fmt.Sprintf("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s, creationTimestamp: %q}\nspec:\n%s", name, ns, created, spec)
}

// compareEntryClusters compares what ServiceEntries' clusters hold beyond
// their type and TLS: a DNS cluster's inline endpoints (and their
// auto-mTLS marks), lookup family, TTL and refresh; an ORIGINAL_DST
// cluster's port rewrite.
func compareEntryClusters(d *differences, istioSim, ourSim *simulation.Simulation) {
	d.t.Helper()
	ours := xdstest.ExtractClusters(ourSim.Clusters)
	for _, ic := range istioSim.Clusters {
		oc, ok := ours[ic.GetName()]
		if !ok {
			continue
		}
		d.check("cluster DNS "+ic.GetName(), dnsFields(ic), dnsFields(oc), "")
		d.check("cluster port override "+ic.GetName(), fmt.Sprint(ic.GetOriginalDstLbConfig().GetUpstreamPortOverride().GetValue()),
			fmt.Sprint(oc.GetOriginalDstLbConfig().GetUpstreamPortOverride().GetValue()), "")
	}
}

func dnsFields(c *clusterv3.Cluster) string {
	switch c.GetType() {
	case clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
	default:
		return "-"
	}
	//nolint:staticcheck // the fields Istio sets
	return fmt.Sprintf("family %s, respect TTL %t, refresh %s, resolver %s, endpoints %s", c.GetDnsLookupFamily(), c.GetRespectDnsTtl(),
		c.GetDnsRefreshRate().AsDuration(), c.GetTypedDnsResolverConfig().GetName(), endpointsString(c.GetLoadAssignment()))
}

// benchEntries are n ServiceEntries of namespace bench: a third DNS with
// an HTTP port, a third STATIC with an address, a TCP port and two
// endpoints, a third DNS with a TLS port and no address (chosen by SNI).
func benchEntries(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: e%d, namespace: bench}\nspec:\n  hosts: [e%d.example.com]\n  location: MESH_EXTERNAL\n", i, i)
		switch i % 3 {
		case 0:
			b.WriteString("  resolution: DNS\n  ports: [{name: http, number: 80, protocol: HTTP}]\n")
		case 1:
			fmt.Fprintf(&b, "  resolution: STATIC\n  addresses: [240.0.%d.%d]\n  ports: [{name: tcp, number: 5432, protocol: TCP}]\n"+
				"  endpoints: [{address: 192.0.%d.1}, {address: 192.0.%d.2}]\n", i/250, i%250+1, i%250, i%250)
		case 2:
			b.WriteString("  resolution: DNS\n  ports: [{name: tls, number: 443, protocol: TLS}]\n")
		}
	}
	return b.String()
}

// BenchmarkSidecarGenerationWithServiceEntries is BenchmarkSidecarGeneration
// for 1,000 services and 100 ServiceEntries, by Istio's generator and ours.
func BenchmarkSidecarGenerationWithServiceEntries(b *testing.B) {
	objects := benchWorld(1000)
	pod := objects[2].(*corev1.Pod) // svc-0-0
	cfg := benchPolicies + benchEntries(100)
	b.Run("istio/services=1000/entries=100", func(b *testing.B) { benchIstioPush(b, objects, pod, cfg) })
	b.Run("bulwark/services=1000/entries=100", func(b *testing.B) { benchOurPush(b, objects, pod, cfg) })
}
