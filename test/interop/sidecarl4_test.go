package interop

import (
	"fmt"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"istio.io/istio/pilot/pkg/simulation"
	"istio.io/istio/pilot/test/xdstest"
)

// sidecarL4Case is one comparison of TestSidecarL4RoutesMatchIstio: Istio
// configuration over sidecarWorld, the sidecars judged, the connections
// whose clusters both generators must agree on (and, where given, equal
// want), and the outbound listeners whose filter chains are compared on
// the protos.
type sidecarL4Case struct {
	name         string
	istio        string
	pods         []string
	registryOnly bool
	calls        []entryCall
	listeners    []string
}

func vs(name, ns, spec string) string {
	return fmt.Sprintf("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: %s, namespace: %s}\nspec:\n%s", name, ns, spec)
}

// vsAt is vs created at minute m of 2026-01-01: the order of several.
func vsAt(name, ns string, m int, spec string) string {
	return fmt.Sprintf("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: %s, namespace: %s, creationTimestamp: \"2026-01-01T00:%02d:00Z\"}\nspec:\n%s", name, ns, m, spec)
}

const (
	echoVIP    = "10.96.0.10"
	peersEP    = "10.0.1.5"
	tlsVIP     = "240.240.2.1"
	echoTCP    = "outbound|9090||echo.app.svc.cluster.local"
	backendTCP = "outbound|9090||backend.other.svc.cluster.local"
	// tlsVIPEntry is a TLS host with an address: its listener is
	// "240.240.2.1_443", its own chain chosen by nothing.
	tlsVIPEntry = `  hosts: [tls.example.com]
  addresses: [240.240.2.1]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: tls, number: 443, protocol: TLS}]
`
	// echoDRAt is echoDR, subsets v1 and v2 of echo.
	twoPods = "app/sleep-1,other/backend-1"
)

var sidecarL4Cases = []sidecarL4Case{{
	name: "tcp route on a TCP port to another service",
	istio: vs("echo-tcp", "app", `  hosts: [echo]
  tcp:
  - route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 9090}}}]
`),
	calls:     []entryCall{tcpTo(echoVIP, 9090, backendTCP), tlsTo(echoVIP, 9090, "echo", backendTCP)},
	listeners: []string{"10.96.0.10_9090"},
}, {
	name: "tcp weights to subsets of a DestinationRule",
	istio: echoDR + vs("echo-tcp", "app", `  hosts: [echo]
  tcp:
  - route:
    - {destination: {host: echo, subset: v1}, weight: 70}
    - {destination: {host: echo, subset: v2}, weight: 30}
    - {destination: {host: backend.other.svc.cluster.local}, weight: 0}
`),
	calls:     []entryCall{tcpTo(echoVIP, 9090, "")}, // the simulator picks no weighted cluster: the protos are compared
	listeners: []string{"10.96.0.10_9090"},
}, {
	name: "tcp match by port: each port its own rule, an undeclared port keeps sniffing",
	istio: vs("echo-tcp", "app", `  hosts: [echo.app.svc.cluster.local]
  tcp:
  - match: [{port: 5000}]
    route: [{destination: {host: sleep}}]
  - match: [{port: 9090}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
  - match: [{port: 1234}]
    route: [{destination: {host: legacy}}]
`),
	calls: []entryCall{
		tcpTo(echoVIP, 9090, backendTCP),
		tcpTo(echoVIP, 5000, "outbound|80||sleep.app.svc.cluster.local"),
		httpTo("echo.app.svc.cluster.local", 5000, ""),
	},
	listeners: []string{"10.96.0.10_9090", "10.96.0.10_5000"},
}, {
	name: "tcp match by destination subnets before the service's own chain",
	istio: vs("echo-tcp", "app", `  hosts: [echo]
  tcp:
  - match: [{destinationSubnets: [10.96.0.0/16, 10.1.0.0/16]}, {port: 1}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
  - match: [{destinationSubnets: [192.168.0.1]}]
    route: [{destination: {host: legacy, port: {number: 3306}}}]
`),
	calls:     []entryCall{tcpTo(echoVIP, 9090, backendTCP)},
	listeners: []string{"10.96.0.10_9090"},
}, {
	name: "tcp match by source labels and namespace, per client",
	pods: []string{"app/sleep-1", "other/backend-1", "app/echo-1"},
	istio: vs("echo-tcp", "app", `  hosts: [echo]
  tcp:
  - match: [{sourceLabels: {app: sleep}}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
  - match: [{sourceNamespace: other}]
    route: [{destination: {host: legacy, port: {number: 3306}}}]
  - route: [{destination: {host: sleep, port: {number: 80}}}]
`),
	calls:     []entryCall{tcpTo(echoVIP, 9090, "")},
	listeners: []string{"10.96.0.10_9090"},
}, {
	name: "tcp match by gateways: mesh applies, a gateway does not",
	istio: vs("echo-tcp", "app", `  hosts: [echo]
  gateways: [mesh, istio-system/ingress]
  tcp:
  - match: [{gateways: [istio-system/ingress]}]
    route: [{destination: {host: legacy, port: {number: 3306}}}]
  - match: [{gateways: [mesh], port: 9090}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
`),
	calls:     []entryCall{tcpTo(echoVIP, 9090, backendTCP)},
	listeners: []string{"10.96.0.10_9090"},
}, {
	name: "tcp route exported to its own namespace only",
	pods: []string{"app/sleep-1", "other/backend-1"},
	istio: vs("echo-tcp", "app", `  hosts: [echo]
  exportTo: [.]
  tcp:
  - route: [{destination: {host: backend.other.svc.cluster.local}}]
`),
	calls:     []entryCall{tcpTo(echoVIP, 9090, "")},
	listeners: []string{"10.96.0.10_9090"},
}, {
	name: "two VirtualServices for one host: the older one's tcp route",
	istio: vsAt("newer", "app", 5, `  hosts: [echo]
  tcp:
  - route: [{destination: {host: legacy, port: {number: 3306}}}]
`) + vsAt("older", "app", 1, `  hosts: [echo]
  tcp:
  - route: [{destination: {host: backend.other.svc.cluster.local}}]
`),
	calls:     []entryCall{tcpTo(echoVIP, 9090, backendTCP)},
	listeners: []string{"10.96.0.10_9090"},
}, {
	name: "tcp route on each endpoint listener of a headless service",
	istio: vs("peers", "other", `  hosts: [backend-peers]
  tcp:
  - match: [{port: 6379}]
    route: [{destination: {host: backend, port: {number: 9090}}}]
`),
	pods:      []string{"app/sleep-1"},
	calls:     []entryCall{tcpTo(peersEP, 6379, backendTCP), tcpTo(peersEP, 7000, "")},
	listeners: []string{"10.0.1.5_6379", "10.0.1.5_7000"},
}, {
	name: "tls routes by SNI on a TLS host with an address",
	istio: entry("tls-vip", tlsVIPEntry) + entry("secure", tlsEntriesDNS) + vs("tls", "app", `  hosts: [tls.example.com, b.example.com, alt.example.com]
  tls:
  - match: [{sniHosts: [tls.example.com]}]
    route: [{destination: {host: secure.example.com}}]
  - match: [{sniHosts: [alt.example.com, b.example.com]}]
    route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 9090}}}]
`),
	calls: []entryCall{
		tlsTo(tlsVIP, 443, "tls.example.com", "outbound|443||secure.example.com"),
		tlsTo(tlsVIP, 443, "b.example.com", backendTCP),
		tlsTo(tlsVIP, 443, unknownHostName, passthrough),
		tcpTo(tlsVIP, 443, passthrough),
	},
	listeners: []string{"240.240.2.1_443"},
}, {
	name: "tls routes by SNI on TLS hosts without addresses",
	istio: entry("secure", tlsEntriesDNS) + vs("secure", "app", `  hosts: [secure.example.com]
  tls:
  - match: [{sniHosts: [secure.example.com]}]
    route: [{destination: {host: pay.example.com}}]
`),
	calls: []entryCall{
		tlsTo(unknownIP, 443, "secure.example.com", "outbound|443||pay.example.com"),
		tlsTo(unknownIP, 443, "pay.example.com", "outbound|443||pay.example.com"),
		tlsTo(unknownIP, 443, unknownHostName, passthrough),
	},
	listeners: []string{"0.0.0.0_443"},
}, {
	name: "tls weights",
	istio: entry("tls-vip", tlsVIPEntry) + entry("secure", tlsEntriesDNS) + vs("tls", "app", `  hosts: [tls.example.com]
  tls:
  - match: [{sniHosts: [tls.example.com]}]
    route:
    - {destination: {host: secure.example.com}, weight: 25}
    - {destination: {host: pay.example.com}, weight: 75}
`),
	calls:     []entryCall{tlsTo(tlsVIP, 443, "tls.example.com", "")},
	listeners: []string{"240.240.2.1_443"},
}, {
	name: "tls: a later match with the same SNI names is never reached; source labels choose per client",
	pods: []string{"app/sleep-1", "other/backend-1"},
	istio: entry("tls-vip", tlsVIPEntry) + entry("secure", tlsEntriesDNS) + vs("tls", "app", `  hosts: [tls.example.com]
  tls:
  - match: [{sniHosts: [tls.example.com], sourceLabels: {app: backend}}]
    route: [{destination: {host: pay.example.com}}]
  - match: [{sniHosts: [tls.example.com]}]
    route: [{destination: {host: secure.example.com}}]
  - match: [{sniHosts: [tls.example.com]}]
    route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 9090}}}]
`),
	calls:     []entryCall{tlsTo(tlsVIP, 443, "tls.example.com", "")},
	listeners: []string{"240.240.2.1_443"},
}, {
	name: "tls route on a wildcard entry host, by port and destination subnets",
	istio: entry("wild", `  hosts: ["*.wild.example.com"]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{name: tls, number: 9443, protocol: TLS}]
`) + entry("secure", tlsEntriesDNS) + vs("wild", "app", `  hosts: ["*.wild.example.com"]
  tls:
  - match: [{sniHosts: [a.wild.example.com], port: 9443}]
    route: [{destination: {host: secure.example.com, port: {number: 443}}}]
  - match: [{sniHosts: ["*.wild.example.com"], destinationSubnets: [192.0.2.0/24]}]
    route: [{destination: {host: pay.example.com, port: {number: 443}}}]
  - match: [{sniHosts: [b.wild.example.com], port: 1}]
    route: [{destination: {host: pay.example.com, port: {number: 443}}}]
`),
	calls: []entryCall{
		// Envoy chooses by destination address before server name.
		tlsTo("198.51.100.1", 9443, "a.wild.example.com", "outbound|443||secure.example.com"),
		tlsTo(unknownIP, 9443, "a.wild.example.com", "outbound|443||pay.example.com"),
		tlsTo(unknownIP, 9443, "c.wild.example.com", "outbound|443||pay.example.com"),
		tlsTo("198.51.100.1", 9443, "b.wild.example.com", ""),
	},
	listeners: []string{"0.0.0.0_9443"},
}, {
	name:         "tls routes under REGISTRY_ONLY: unknown names go nowhere",
	registryOnly: true,
	istio: entry("tls-vip", tlsVIPEntry) + entry("secure", tlsEntriesDNS) + vs("tls", "app", `  hosts: [tls.example.com]
  tls:
  - match: [{sniHosts: [tls.example.com]}]
    route: [{destination: {host: secure.example.com}}]
`),
	calls: []entryCall{
		tlsTo(tlsVIP, 443, "tls.example.com", "outbound|443||secure.example.com"),
		tlsTo(tlsVIP, 443, unknownHostName, blackHole),
	},
	listeners: []string{"240.240.2.1_443"},
}, {
	name: "tls route by a wildcard server name of a wildcard VirtualService host",
	istio: entry("tls-vip", tlsVIPEntry) + entry("secure", tlsEntriesDNS) + vs("tls", "app", `  hosts: ["*.example.com"]
  tls:
  - match: [{sniHosts: ["*.example.com"]}]
    route: [{destination: {host: pay.example.com}}]
`),
	calls: []entryCall{
		tlsTo(tlsVIP, 443, "anything.example.com", "outbound|443||pay.example.com"),
		tlsTo(tlsVIP, 443, "example.org", passthrough),
		tlsTo(unknownIP, 443, "secure.example.com", "outbound|443||pay.example.com"),
	},
	listeners: []string{"240.240.2.1_443"},
}, {
	name: "tcp rules do not apply on a TLS port, nor tls rules on a TCP one; a tls rule for another name takes the port",
	istio: entry("tls-vip", tlsVIPEntry) + vs("mixed", "app", `  hosts: [tls.example.com, echo.app.svc.cluster.local]
  tcp:
  - route: [{destination: {host: backend.other.svc.cluster.local, port: {number: 9090}}}]
  tls:
  - match: [{sniHosts: [echo.app.svc.cluster.local]}]
    route: [{destination: {host: legacy, port: {number: 3306}}}]
`),
	calls: []entryCall{
		tlsTo(tlsVIP, 443, "tls.example.com", passthrough),
		tlsTo(tlsVIP, 443, "echo.app.svc.cluster.local", "outbound|3306||legacy.app.svc.cluster.local"),
		tcpTo(echoVIP, 9090, backendTCP),
		tlsTo(echoVIP, 9090, "echo.app.svc.cluster.local", backendTCP),
	},
	listeners: []string{"240.240.2.1_443", "10.96.0.10_9090"},
}}

// TestSidecarL4RoutesMatchIstio compares, for each case of
// sidecarL4Cases, the outbound listeners Istio's generator and ours give
// the sidecars of the case's pods for the same objects: Istio's
// simulator on both, call by call (the mesh's own calls and the case's
// TLS and TCP connections, some of which must reach a named cluster on
// both sides), and the filter chains of the case's listeners field by
// field (matches, tcp_proxy with its weighted clusters, metadata,
// listener filters), both validated by Istio's xdstest validators and
// Envoy's ValidateAll.
func TestSidecarL4RoutesMatchIstio(t *testing.T) {
	quietIstioLogs(t)
	if len(sidecarL4Cases) < 15 {
		t.Fatalf("%d cases, want at least 15", len(sidecarL4Cases))
	}
	w := newMeshObjects(t)
	for _, c := range sidecarL4Cases {
		t.Run(c.name, func(t *testing.T) {
			pods := c.pods
			if pods == nil {
				pods = strings.Split(twoPods, ",")[:1]
			}
			sc := sidecarScenario{name: c.name, istio: c.istio, pods: pods, registryOnly: c.registryOnly}
			s := istioServer(t, sc)
			ours := ourSide(t, w, sc)
			fromVS := 0
			for _, key := range pods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) {
					proxy := istioProxy(s, pod)
					istioSim := simulation.NewSimulation(t, s, proxy)
					ourSim := *istioSim
					ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours[key].listeners, ours[key].clusters, ours[key].routes
					xdstest.ValidateListeners(t, ourSim.Listeners)
					for _, l := range ourSim.Listeners {
						if err := l.ValidateAll(); err != nil {
							t.Errorf("listener %s invalid for Envoy: %v", l.GetName(), err)
						}
					}
					fromVS += compareL4Listeners(t, c.listeners, istioSim.Listeners, ourSim.Listeners)
					calls := outboundCalls(w, pod)
					for _, ec := range c.calls {
						ec.call.CallMode = simulation.CallModeOutbound
						calls = append(calls, simCall{name: ec.name, call: ec.call})
					}
					for _, call := range calls {
						want, got := simulate(istioSim, call.call), simulate(&ourSim, call.call)
						if want.String() != got.String() {
							t.Errorf("call %s:\n  istio: %s\n  ours:  %s", call.name, want, got)
						}
					}
					for _, ec := range c.calls {
						ec.call.CallMode = simulation.CallModeOutbound
						want, got := simulate(istioSim, ec.call), simulate(&ourSim, ec.call)
						if ec.want != "" && (want.Cluster != ec.want || got.Cluster != ec.want) {
							t.Errorf("call %s: clusters istio %q, ours %q, want %q", ec.name, want.Cluster, got.Cluster, ec.want)
						}
					}
				})
			}
			if fromVS == 0 && !strings.Contains(c.name, "exported to its own namespace") {
				t.Errorf("no chain of Istio's names a VirtualService: the case tests nothing")
			}
		})
	}
}

// compareL4Listeners compares the listeners named of Istio's and ours,
// chain by chain, and returns how many of Istio's chains come from a
// VirtualService: those naming it in their metadata, and those chosen by
// destination subnets.
func compareL4Listeners(t *testing.T, names []string, istio, ours []*listenerv3.Listener) int {
	t.Helper()
	byName := func(ls []*listenerv3.Listener) map[string]*listenerv3.Listener {
		m := map[string]*listenerv3.Listener{}
		for _, l := range ls {
			m[l.GetName()] = l
		}
		return m
	}
	il, ol := byName(istio), byName(ours)
	fromVS := 0
	for _, name := range names {
		i, o := il[name], ol[name]
		if i == nil || o == nil {
			t.Errorf("listener %s: istio has it %t, ours %t", name, i != nil, o != nil)
			continue
		}
		want, got := l4Chains(t, i), l4Chains(t, o)
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("listener %s chains differ (-istio +ours):\n%s", name, diff)
		}
		for _, fc := range append(i.GetFilterChains(), i.GetDefaultFilterChain()) {
			if _, ok := fc.GetMetadata().GetFilterMetadata()["istio"]; ok || len(fc.GetFilterChainMatch().GetPrefixRanges()) > 0 {
				fromVS++
			}
		}
	}
	return fromVS
}

// l4Chain is what is compared of a filter chain: its match and metadata
// as they are, and its tcp_proxy decoded (cluster or weighted clusters
// with their weights, stat prefix, access log).
type l4Chain struct {
	Name     string
	Match    *listenerv3.FilterChainMatch
	Metadata string
	TCPProxy *tcpv3.TcpProxy
	Filters  []string
}

type l4Listener struct {
	ListenerFilters []string
	Chains          []l4Chain
	Default         *l4Chain
}

func l4Chains(t *testing.T, l *listenerv3.Listener) l4Listener {
	t.Helper()
	out := l4Listener{}
	for _, f := range l.GetListenerFilters() {
		out.ListenerFilters = append(out.ListenerFilters, f.GetName())
	}
	conv := func(fc *listenerv3.FilterChain) l4Chain {
		c := l4Chain{Name: fc.GetName(), Match: fc.GetFilterChainMatch(), Metadata: fc.GetMetadata().GetFilterMetadata()["istio"].GetFields()["config"].GetStringValue()}
		for _, f := range fc.GetFilters() {
			c.Filters = append(c.Filters, f.GetName())
			if f.GetTypedConfig().GetTypeUrl() != tcpProxyType {
				continue
			}
			p := &tcpv3.TcpProxy{}
			if err := f.GetTypedConfig().UnmarshalTo(p); err != nil {
				t.Fatal(err)
			}
			c.TCPProxy = p
		}
		// An empty match is no match.
		if c.Match != nil && len(c.Match.GetServerNames()) == 0 && len(c.Match.GetPrefixRanges()) == 0 && c.Match.GetTransportProtocol() == "" &&
			len(c.Match.GetApplicationProtocols()) == 0 && c.Match.GetDestinationPort() == nil {
			c.Match = nil
		}
		return c
	}
	for _, fc := range l.GetFilterChains() {
		out.Chains = append(out.Chains, conv(fc))
	}
	if d := l.GetDefaultFilterChain(); d != nil {
		c := conv(d)
		out.Default = &c
	}
	return out
}

// TestSidecarL4OverlapsLeftOut: tls and tcp matches whose chains Envoy
// could not tell from an earlier one's. Istio's generator sends both, and
// Envoy refuses the listener (checked here on Istio's listener: two chains
// match one connection); ours leaves the later match out, so the listener
// is valid, and every other connection goes where Istio's config says.
func TestSidecarL4OverlapsLeftOut(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	for _, c := range []sidecarL4Case{{
		name: "a server name two VirtualServices choose",
		istio: entry("tls-vip", tlsVIPEntry) + entry("secure", tlsEntriesDNS) + vsAt("first", "app", 1, `  hosts: [tls.example.com]
  tls:
  - match: [{sniHosts: [tls.example.com]}]
    route: [{destination: {host: secure.example.com}}]
`) + vsAt("second", "app", 2, `  hosts: [tls.example.com, b.example.com, c.example.com]
  tls:
  - match: [{sniHosts: [b.example.com, tls.example.com]}]
    route: [{destination: {host: pay.example.com}}]
  - match: [{sniHosts: [c.example.com]}]
    route: [{destination: {host: pay.example.com}}]
`),
		calls: []entryCall{
			tlsTo(tlsVIP, 443, "tls.example.com", "outbound|443||secure.example.com"),
			tlsTo(tlsVIP, 443, "c.example.com", "outbound|443||pay.example.com"),
		},
		listeners: []string{"240.240.2.1_443"},
	}, {
		name: "a destination subnet two tcp rules choose",
		istio: vs("echo-tcp", "app", `  hosts: [echo]
  tcp:
  - match: [{destinationSubnets: [10.96.0.0/16]}]
    route: [{destination: {host: backend.other.svc.cluster.local}}]
  - match: [{destinationSubnets: [10.1.0.0/16, 10.96.0.0/16]}]
    route: [{destination: {host: legacy, port: {number: 3306}}}]
`),
		calls:     []entryCall{tcpTo(echoVIP, 9090, backendTCP)},
		listeners: []string{"10.96.0.10_9090"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			sc := sidecarScenario{name: c.name, istio: c.istio, pods: []string{"app/sleep-1"}}
			s := istioServer(t, sc)
			ours := ourSide(t, w, sc)
			pod := w.pod(t, "app/sleep-1")
			proxy := istioProxy(s, pod)
			istioSim := simulation.NewSimulation(t, s, proxy)
			ourSim := *istioSim
			ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours["app/sleep-1"].listeners, ours["app/sleep-1"].clusters, ours["app/sleep-1"].routes
			xdstest.ValidateListeners(t, ourSim.Listeners)
			for _, name := range c.listeners {
				for side, ls := range map[string][]*listenerv3.Listener{"istio": istioSim.Listeners, "ours": ourSim.Listeners} {
					for _, l := range ls {
						if l.GetName() != name {
							continue
						}
						o := envoyOverlaps(l)
						if side == "istio" && o == "" {
							t.Errorf("Istio's listener %s has no overlapping chains: the case tests nothing", name)
						}
						if side == "ours" && o != "" {
							t.Errorf("our listener %s would be refused by Envoy: %s", name, o)
						}
					}
				}
			}
			// The first call reaches the overlap: Istio's simulator finds
			// several chains (Envoy would have refused the listener); ours
			// the earlier match's. The others agree.
			for i, ec := range c.calls {
				ec.call.CallMode = simulation.CallModeOutbound
				want, got := simulate(istioSim, ec.call), simulate(&ourSim, ec.call)
				if i == 0 {
					if !strings.Contains(want.Error, "multiple filter chains") || got.Cluster != ec.want {
						t.Errorf("call %s: istio %s, ours %s; want Istio's refused, ours %s", ec.name, want, got, ec.want)
					}
					continue
				}
				if want.Cluster != ec.want || got.Cluster != ec.want {
					t.Errorf("call %s: clusters istio %q, ours %q, want %q", ec.name, want.Cluster, got.Cluster, ec.want)
				}
			}
		})
	}
}

// envoyOverlaps names two filter chains of l that Envoy would find for one
// connection (it refuses such a listener): their matches, expanded by
// server name and prefix range, share a combination. "" when none.
func envoyOverlaps(l *listenerv3.Listener) string {
	seen := map[string]int{}
	for i, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		names := append([]string{}, m.GetServerNames()...)
		if len(names) == 0 {
			names = []string{""}
		}
		prefixes := []string{""}
		if len(m.GetPrefixRanges()) > 0 {
			prefixes = nil
			for _, p := range m.GetPrefixRanges() {
				prefixes = append(prefixes, fmt.Sprintf("%s/%d", p.GetAddressPrefix(), p.GetPrefixLen().GetValue()))
			}
		}
		for _, n := range names {
			for _, p := range prefixes {
				k := fmt.Sprintf("%d|%s|%s|%s|%s", m.GetDestinationPort().GetValue(), p, n, m.GetTransportProtocol(), strings.Join(m.GetApplicationProtocols(), ","))
				if j, ok := seen[k]; ok {
					return fmt.Sprintf("chains %d and %d both match %s", j, i, k)
				}
				seen[k] = i
			}
		}
	}
	return ""
}
