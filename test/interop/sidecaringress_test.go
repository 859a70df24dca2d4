package interop

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/prototext"
	"istio.io/istio/pilot/pkg/features"
	"istio.io/istio/pilot/pkg/simulation"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// A Sidecar's ingress listeners, judged against Istio's generator on the
// same objects: the inbound listener's filter chains field by field (match,
// name, TLS, the authorization, JWT and terminal filters and their
// cluster), the inbound clusters (type, endpoint, upstream bind, limits,
// upstream protocol), the names of every resource, and Istio's simulator
// on inbound calls to the ingress ports and to the services' ports.

// ingressScenario is a Sidecar scenario with ingress listeners.
type ingressScenario struct {
	sidecarScenario
	// ports are the ingress ports called, with the protocol clients speak
	// ("http", "http2", "tcp"; "" both HTTP and TCP).
	ports map[int]string
	// tls is Istio's ENABLE_TLS_ON_SIDECAR_INGRESS and our
	// Mesh.SidecarIngressTLS.
	tls bool
}

const (
	echoSelector = "  workloadSelector: {labels: {app: echo}}\n"
	tlsFiles     = "serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem"
	paDisable    = `---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: echo-off, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  mtls: {mode: DISABLE}
`
	paStrict = `---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec:
  mtls: {mode: STRICT}
`
)

var echoAndSleep = []string{"app/echo-1", "app/sleep-1"}

var ingressScenarios = []ingressScenario{{
	sidecarScenario: sidecarScenario{name: "HTTP to 127.0.0.1; the services' ports left to the passthrough", pods: echoAndSleep,
		istio: sidecarRes("app", "echo", echoSelector+"  ingress: [{port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: \"127.0.0.1:8080\"}]\n")},
	ports: map[int]string{9080: "http"},
}, {
	sidecarScenario: sidecarScenario{name: "TCP to the pod's own address under STRICT", pods: echoAndSleep,
		istio: paStrict + sidecarRes("app", "echo", echoSelector+"  ingress: [{port: {number: 9091, protocol: TCP, name: tcp}, defaultEndpoint: \"0.0.0.0:9091\"}]\n")},
	ports: map[int]string{9091: "tcp"},
}, {
	sidecarScenario: sidecarScenario{name: "an undeclared protocol to the original destination", pods: echoAndSleep,
		istio: sidecarRes("app", "echo", echoSelector+"  ingress: [{port: {number: 5001, name: other}}, {port: {number: 6001, protocol: TCP, name: raw}, defaultEndpoint: \"[::1]:6001\"}]\n")},
	ports: map[int]string{5001: "", 6001: "tcp"},
}, {
	sidecarScenario: sidecarScenario{name: "gRPC to a unix socket with a connection pool", pods: echoAndSleep,
		istio: sidecarRes("app", "echo", echoSelector+`  ingress:
  - port: {number: 7070, protocol: GRPC, name: grpc}
    defaultEndpoint: unix:///var/run/echo.sock
    connectionPool:
      http: {http2MaxRequests: 100, http1MaxPendingRequests: 7, maxRetries: 2, maxConcurrentStreams: 10, idleTimeout: 30s, maxRequestsPerConnection: 4}
      tcp: {maxConnections: 50, connectTimeout: 2s, maxConnectionDuration: 600s, tcpKeepalive: {time: 60s, interval: 10s, probes: 3}}
  - port: {number: 9080, protocol: HTTP, name: http}
    defaultEndpoint: "127.0.0.1:8080"
  inboundConnectionPool: {http: {http2MaxRequests: 20, useClientProtocol: true}}
`)},
	ports: map[int]string{7070: "http2", 9080: "http"},
}, {
	sidecarScenario: sidecarScenario{name: "bind names the chains, captureMode IPTABLES", pods: echoAndSleep,
		istio: sidecarRes("app", "echo", echoSelector+"  ingress: [{port: {number: 8080, protocol: HTTP, name: http}, bind: 10.0.0.5, captureMode: IPTABLES, defaultEndpoint: \"127.0.0.1:8081\"}]\n")},
	ports: map[int]string{8080: "http"},
}, {
	sidecarScenario: sidecarScenario{name: "captureMode NONE is not bound", pods: echoAndSleep,
		istio: sidecarRes("app", "echo", echoSelector+"  ingress: [{port: {number: 9000, protocol: TCP, name: tcp}, captureMode: NONE, defaultEndpoint: \"127.0.0.1:9001\"}, {port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: \"127.0.0.1:8080\"}]\n")},
	ports: map[int]string{9000: "tcp", 9080: "http"},
}, {
	sidecarScenario: sidecarScenario{name: "authorization and JWT on ingress chains", pods: echoAndSleep,
		istio: sidecarRes("app", "echo", echoSelector+"  ingress: [{port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: \"127.0.0.1:8080\"}, {port: {number: 9091, protocol: TCP, name: tcp}, defaultEndpoint: \"127.0.0.1:9091\"}]\n") + `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-app, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules: [{from: [{source: {namespaces: ["app"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin"]}}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  jwtRules:
  - issuer: https://idp.example
    jwks: '{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
`},
	ports: map[int]string{9080: "http", 9091: "tcp"},
}, {
	sidecarScenario: sidecarScenario{name: "its own TLS where mTLS is DISABLE", pods: echoAndSleep,
		istio: paDisable + sidecarRes("app", "echo", echoSelector+"  ingress:\n"+
			"  - {port: {number: 8443, protocol: HTTPS, name: https}, defaultEndpoint: \"127.0.0.1:8080\", tls: {mode: SIMPLE, "+tlsFiles+"}}\n"+
			"  - {port: {number: 9443, protocol: TLS, name: tls}, defaultEndpoint: \"127.0.0.1:9091\", tls: {mode: MUTUAL, "+tlsFiles+", caCertificates: /etc/certs/ca.pem, minProtocolVersion: TLSV1_3}}\n")},
	ports: map[int]string{8443: "http", 9443: "tcp"},
	tls:   true,
}, {
	sidecarScenario: sidecarScenario{name: "its own TLS under STRICT: Istio mTLS, HTTPS read as HTTP", pods: echoAndSleep,
		istio: paStrict + sidecarRes("app", "echo", echoSelector+"  ingress:\n"+
			"  - {port: {number: 8443, protocol: HTTPS, name: https}, defaultEndpoint: \"127.0.0.1:8080\", tls: {mode: SIMPLE, "+tlsFiles+"}}\n")},
	ports: map[int]string{8443: "http"},
	tls:   true,
}, {
	sidecarScenario: sidecarScenario{name: "its own TLS not honoured without the switch", pods: echoAndSleep,
		istio: paDisable + sidecarRes("app", "echo", echoSelector+"  ingress:\n"+
			"  - {port: {number: 8443, protocol: HTTPS, name: https}, defaultEndpoint: \"127.0.0.1:8080\", tls: {mode: SIMPLE, "+tlsFiles+"}}\n")},
	ports: map[int]string{8443: "tcp"},
}, {
	sidecarScenario: sidecarScenario{name: "inboundConnectionPool on the services' inbound clusters", pods: echoAndSleep,
		istio: sidecarRes("app", "echo", echoSelector+"  egress: [{hosts: [\"./*\"]}]\n  inboundConnectionPool: {http: {http1MaxPendingRequests: 5, maxRequestsPerConnection: 3}, tcp: {maxConnections: 10}}\n")},
}, {
	sidecarScenario: sidecarScenario{name: "the root namespace's default Sidecar's ingress", pods: []string{"app/echo-1", "app/sleep-1", "other/backend-1"},
		istio: sidecarRes("istio-system", "default", "  ingress: [{port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: \"0.0.0.0:8080\"}]\n")},
	ports: map[int]string{9080: "http"},
}}

// ingressAllowedDifferences are the intended differences of the ingress
// scenarios.
var ingressAllowedDifferences = []allowedDifference{{
	scenario: regexp.MustCompile(`^captureMode NONE is not bound$`),
	subject:  regexp.MustCompile(`^listener 10\.0\.0\.5_9000$`),
	istio:    "present", ours: "absent",
	reason: "a listener bound to its port (captureMode NONE) is not built; reported",
}}

// TestSidecarIngressMatchesIstio compares, for every ingress scenario and
// pod, our configuration with Istio's generator's on the same objects.
func TestSidecarIngressMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	used := map[int]bool{}
	ran, want := 0, 0
	for _, sc := range ingressScenarios {
		want += len(sc.pods)
		t.Run(sc.name, func(t *testing.T) {
			// Istio reads its switch while it generates; the test is
			// not parallel, and puts it back after Istio's server stops.
			old := features.EnableTLSOnSidecarIngress
			features.EnableTLSOnSidecarIngress = sc.tls
			t.Cleanup(func() { features.EnableTLSOnSidecarIngress = old })
			s := istioServer(t, sc.sidecarScenario)
			snap := ourSnapshot(t, w.objects, sc.istio)
			g := &envoygen.Generator{
				TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain),
				Mesh:        envoygen.Mesh{SidecarIngressTLS: sc.tls},
			}
			ingressSeen := false
			for _, key := range sc.pods {
				pod := w.pod(t, key)
				t.Run(pod.Name, func(t *testing.T) {
					ours := ourResources(t, g, snap, &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}})
					proxy := istioProxy(s, pod)
					if proxy.SidecarScope.HasIngressListener() {
						ingressSeen = true
					}
					istioSim := simulation.NewSimulation(t, s, proxy)
					ourSim := *istioSim
					ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours.listeners, ours.clusters, ours.routes
					ran++
					d := &differences{t: t, scenario: sc.name, used: used, list: ingressAllowedDifferences}
					compareResourceNames(d, istioSim, &ourSim)
					compareInboundChains(d, istioSim.Listeners, ours.listeners)
					compareInboundClusters(d, istioSim.Clusters, ours.clusters)
					calls := append(inboundCalls(w, pod), ingressCalls(pod, sc.ports)...)
					for _, c := range calls {
						want, got := simulate(istioSim, c.call), simulate(&ourSim, c.call)
						d.check("call "+c.name, want.String(), got.String(),
							fmt.Sprintf("\n  istio details: %s\n  ours details:  %s", want.details(), got.details()))
					}
					d.logAllowed()
					checkConfigValid(t, ours)
				})
			}
			if !ingressSeen && !strings.HasPrefix(sc.name, "inboundConnectionPool") {
				t.Error("no pod of the scenario has ingress listeners in Istio's eyes: the scenario tests nothing")
			}
		})
	}
	if ran == want {
		for i, a := range ingressAllowedDifferences {
			if !used[i] {
				t.Errorf("allowed difference %d (%s) no longer occurs; delete it", i, a.reason)
			}
		}
	}
}

// ingressCalls are inbound connections to the ingress ports, in every TLS
// variant, of the protocols the port's clients speak.
func ingressCalls(pod *corev1.Pod, ports map[int]string) []simCall {
	var out []simCall
	for _, port := range slices.Sorted(maps.Keys(ports)) {
		for _, proto := range protocolsOf(ports[port]) {
			for _, v := range tlsVariants(proto) {
				out = append(out, simCall{
					name: fmt.Sprintf("inbound %s %s to ingress port %d", v.name, proto, port),
					call: simulation.Call{
						CallMode: simulation.CallModeInbound, Address: pod.Status.PodIP, Port: port,
						Protocol: proto, TLS: v.tls, Alpn: v.alpn,
					},
				})
			}
		}
	}
	return out
}

// compareInboundChains compares virtualInbound's filter chains, keyed by
// their match: each one's name, TLS, filters and cluster.
func compareInboundChains(d *differences, istio, ours []*listenerv3.Listener) {
	d.t.Helper()
	ic, oc := inboundChains(d.t, istio), inboundChains(d.t, ours)
	keys := append(slices.Collect(maps.Keys(ic)), slices.Collect(maps.Keys(oc))...)
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		d.check("inbound chain "+k, orAbsent(ic[k]), orAbsent(oc[k]), "")
	}
}

func orAbsent(s string) string {
	if s == "" {
		return "absent"
	}
	return s
}

// inboundChains describes the chains of virtualInbound by match.
func inboundChains(t *testing.T, ls []*listenerv3.Listener) map[string]string {
	out := map[string]string{}
	for _, l := range ls {
		if l.GetName() != "virtualInbound" {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			m := fc.GetFilterChainMatch()
			k := fmt.Sprintf("port %d transport %q ALPN %q", m.GetDestinationPort().GetValue(), m.GetTransportProtocol(), m.GetApplicationProtocols())
			out[k] = fmt.Sprintf("name %s, %s, %s", fc.GetName(), downstreamTLS(fc), chainFilters(t, fc))
		}
	}
	return out
}

// downstreamTLS describes a chain's TLS: plaintext, or whether it
// requires a client certificate, its certificates, its validation
// secret and ALPN, and, for other than Istio's mTLS, its TLS parameters.
func downstreamTLS(fc *listenerv3.FilterChain) string {
	ts := fc.GetTransportSocket()
	if ts == nil {
		return "plaintext"
	}
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return "TLS(undecodable: " + err.Error() + ")"
	}
	common := ctx.GetCommonTlsContext()
	var certs []string
	for _, c := range common.GetTlsCertificateSdsSecretConfigs() {
		certs = append(certs, sdsString(c))
	}
	ca := common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()
	out := fmt.Sprintf("TLS{require client cert %v, cert %v, ca %s, ALPN %q", ctx.GetRequireClientCertificate().GetValue(), certs, sdsString(ca), common.GetAlpnProtocols())
	if ca.GetName() != "ROOTCA" {
		out += ", params " + prototext.Format(common.GetTlsParams())
	}
	return out + "}"
}

// chainFilters lists a chain's authorization, JWT and terminal filters
// (by type), and the cluster its tcp_proxy or first route goes to.
func chainFilters(t *testing.T, fc *listenerv3.FilterChain) string {
	var names []string
	short := func(typeURL string) string { return typeURL[strings.LastIndex(typeURL, ".")+1:] }
	for _, f := range fc.GetFilters() {
		tu := f.GetTypedConfig().GetTypeUrl()
		switch {
		case strings.HasSuffix(tu, "network.rbac.v3.RBAC"):
			names = append(names, "network-rbac")
		case tu == tcpProxyType:
			tp := &tcpv3.TcpProxy{}
			if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatalf("tcp_proxy: %v", err)
			}
			names = append(names, "tcp_proxy→"+tp.GetCluster())
		case tu == hcmType:
			h := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
				t.Fatalf("http_connection_manager: %v", err)
			}
			var hf []string
			for _, x := range h.GetHttpFilters() {
				switch u := x.GetTypedConfig().GetTypeUrl(); {
				case strings.HasSuffix(u, "http.rbac.v3.RBAC"):
					hf = append(hf, "http-rbac")
				case strings.HasSuffix(u, "JwtAuthentication"), strings.HasSuffix(u, "router.v3.Router"):
					hf = append(hf, short(u))
				}
			}
			cluster := ""
			for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if cluster == "" {
						cluster = r.GetRoute().GetCluster()
					}
				}
			}
			names = append(names, fmt.Sprintf("hcm%v→%s", hf, cluster))
		}
	}
	return strings.Join(names, " ")
}

// compareInboundClusters compares the "inbound|" clusters both have: type,
// endpoint, upstream bind, connect timeout, limits, keepalive, the common
// HTTP options and the upstream protocol.
func compareInboundClusters(d *differences, istio, ours []*clusterv3.Cluster) {
	d.t.Helper()
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range ours {
		byName[c.GetName()] = c
	}
	for _, ic := range istio {
		if !strings.HasPrefix(ic.GetName(), "inbound|") {
			continue
		}
		oc, ok := byName[ic.GetName()]
		if !ok {
			continue // compareResourceNames reports it
		}
		d.check("inbound cluster "+ic.GetName(), inboundClusterString(d.t, ic), inboundClusterString(d.t, oc), "")
		d.check("inbound cluster protocol "+ic.GetName(), upstreamProtocol(d.t, ic), upstreamProtocol(d.t, oc), "")
	}
}

func inboundClusterString(t *testing.T, c *clusterv3.Cluster) string {
	var eps []string
	for _, loc := range c.GetLoadAssignment().GetEndpoints() {
		for _, e := range loc.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress()
			if p := a.GetPipe(); p != nil {
				eps = append(eps, "unix:"+p.GetPath())
			} else {
				eps = append(eps, fmt.Sprintf("%s:%d", a.GetSocketAddress().GetAddress(), a.GetSocketAddress().GetPortValue()))
			}
		}
	}
	th := c.GetCircuitBreakers().GetThresholds()
	limits := "none"
	if len(th) > 0 {
		limits = fmt.Sprintf("conn %d pending %d requests %d retries %d", th[0].GetMaxConnections().GetValue(),
			th[0].GetMaxPendingRequests().GetValue(), th[0].GetMaxRequests().GetValue(), th[0].GetMaxRetries().GetValue())
	}
	common := "none"
	if o := httpOptions(t, c); o != nil && o.GetCommonHttpProtocolOptions() != nil {
		common = prototext.Format(o.GetCommonHttpProtocolOptions())
	}
	return fmt.Sprintf("%s endpoints %v bind %q timeout %s limits {%s} keepalive {%s} common {%s}",
		c.GetType(), eps, c.GetUpstreamBindConfig().GetSourceAddress().GetAddress(), c.GetConnectTimeout().AsDuration(),
		limits, prototext.Format(c.GetUpstreamConnectionOptions().GetTcpKeepalive()), common)
}

func httpOptions(t *testing.T, c *clusterv3.Cluster) *httpv3.HttpProtocolOptions {
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil {
		return nil
	}
	o := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(o); err != nil {
		t.Fatalf("cluster %s: HttpProtocolOptions: %v", c.GetName(), err)
	}
	return o
}

// upstreamProtocol is how a cluster chooses its upstream HTTP version:
// "h2" (with its options), "downstream" (the client's), or "default"
// (Envoy's, HTTP/1.1).
func upstreamProtocol(t *testing.T, c *clusterv3.Cluster) string {
	o := httpOptions(t, c)
	if h2 := o.GetExplicitHttpConfig().GetHttp2ProtocolOptions(); h2 != nil {
		return strings.TrimSpace("h2 " + prototext.Format(h2))
	}
	if o.GetUseDownstreamProtocolConfig() != nil {
		return "downstream"
	}
	return "default"
}
