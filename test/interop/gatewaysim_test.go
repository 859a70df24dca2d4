package interop

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/simulation"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pilot/test/xdstest"
	"istio.io/istio/pkg/config/mesh"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// gatewayWorld is sidecarWorld with Istio's legacy ingress gateway: its
// Service translates 80 to 8080 and 443 to 8443, as the
// istio-ingressgateway chart's does, and its Ready pod.
const gatewayWorld = sidecarWorld + `---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.0.99
  clusterIPs: [10.96.0.99]
  selector: {istio: ingressgateway}
  ports:
  - {name: http2, port: 80, targetPort: 8080, protocol: TCP}
  - {name: https, port: 443, targetPort: 8443, protocol: TCP}
---
apiVersion: v1
kind: Pod
metadata:
  name: istio-ingressgateway-1
  namespace: istio-system
  uid: 00000000-0000-0000-0000-0000000a7e01
  labels: {istio: ingressgateway, app: istio-ingressgateway}
spec:
  serviceAccountName: istio-ingressgateway-service-account
  nodeName: n1
  containers:
  - name: istio-proxy
    image: proxyv2
    ports: [{containerPort: 8080}, {containerPort: 8443}]
status:
  phase: Running
  podIP: 10.0.9.1
  podIPs: [{ip: 10.0.9.1}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: istio-ingressgateway-abcde
  namespace: istio-system
  labels: {kubernetes.io/service-name: istio-ingressgateway}
addressType: IPv4
endpoints:
- addresses: [10.0.9.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: istio-ingressgateway-1, namespace: istio-system}
ports:
- {name: http2, port: 8080, protocol: TCP}
- {name: https, port: 8443, protocol: TCP}
`

// Mesh options of every gateway case: tlsDefaults, which terminated
// servers start from, and a gateway topology of one trusted proxy.
var (
	gatewayCurves  = []string{"P-256", "X25519"}
	gatewayCiphers = []string{"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384"}
)

const gatewayTrustedProxies = 1

// gatewayCase is Gateways (and Istio's name of the case it mirrors, in
// pilot/pkg/networking/core/gateway_simulation_test.go, where there is
// one) and the calls made through the ingress gateway.
type gatewayCase struct {
	name   string
	config string
	// allowInsecureSkipVerify is istiod's --allow-insecure-skip-verify.
	allowInsecureSkipVerify bool
	// unprivileged is the pod's UNPRIVILEGED_POD metadata: ports below
	// 1024 are not listened on.
	unprivileged bool
	// policies are AuthorizationPolicies and RequestAuthentications,
	// which both sides read from their Kubernetes sources.
	policies string
	calls    []gatewayCall
}

type gatewayCall struct {
	name string
	call simulation.Call
}

func httpCall(port int, host string) gatewayCall {
	return gatewayCall{fmt.Sprintf("http %s:%d", host, port), simulation.Call{Port: port, HostHeader: host, Protocol: simulation.HTTP, CallMode: simulation.CallModeGateway}}
}

func tlsCall(port int, sni string) gatewayCall {
	return gatewayCall{fmt.Sprintf("https %s:%d", sni, port), simulation.Call{Port: port, HostHeader: sni, Protocol: simulation.HTTP, TLS: simulation.TLS, CallMode: simulation.CallModeGateway}}
}

func mtlsCall(port int, sni string) gatewayCall {
	return gatewayCall{fmt.Sprintf("mtls %s:%d", sni, port), simulation.Call{Port: port, HostHeader: sni, Protocol: simulation.HTTP, TLS: simulation.MTLS, CallMode: simulation.CallModeGateway}}
}

func tcpCall(port int) gatewayCall {
	return gatewayCall{fmt.Sprintf("tcp :%d", port), simulation.Call{Port: port, Protocol: simulation.TCP, CallMode: simulation.CallModeGateway}}
}

// istioGateway is a Gateway of namespace ns selecting the ingress gateway,
// with servers as YAML list items.
func istioGateway(name, ns string, servers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: %s, namespace: %s}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n", name, ns)
	for _, s := range servers {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		for i, l := range lines {
			if i == 0 {
				b.WriteString("  - " + l + "\n")
			} else {
				b.WriteString("    " + l + "\n")
			}
		}
	}
	return b.String() + "---\n"
}

func plainServer(port int, hosts ...string) string {
	return fmt.Sprintf("port: {number: %d, name: http, protocol: HTTP}\nhosts: [%s]", port, quoteAll(hosts))
}

func terminatedServer(port int, name, tls string, hosts ...string) string {
	return fmt.Sprintf("port: {number: %d, name: %s, protocol: HTTPS}\nhosts: [%s]\ntls: %s", port, name, quoteAll(hosts), tls)
}

func quoteAll(hosts []string) string {
	q := make([]string, len(hosts))
	for i, h := range hosts {
		q[i] = `"` + h + `"`
	}
	return strings.Join(q, ", ")
}

// gatewayCases mirror Istio's gateway simulation tests for Gateways no
// VirtualService is bound to, across the TLS modes and host and SNI
// matching; gatewayVSCases (gatewaysimvs_test.go) add those with
// VirtualServices.
var gatewayCases = []gatewayCase{{
	name:   "TestHTTPGateway/no virtual services",
	config: istioGateway("gateway", "default", plainServer(80, "foo.bar")),
	calls:  []gatewayCall{httpCall(8080, "foo.bar"), httpCall(8080, "other.bar"), httpCall(81, "foo.bar"), tlsCall(8443, "foo.bar")},
}, {
	name:   "port without Service is listened on as it is",
	config: istioGateway("gateway", "default", plainServer(8081, "foo.bar")),
	calls:  []gatewayCall{httpCall(8081, "foo.bar"), httpCall(8080, "foo.bar")},
}, {
	name: "two Gateways of two namespaces share the HTTP port",
	config: istioGateway("a", "default", plainServer(80, "a.example.com")) +
		istioGateway("b", "app", plainServer(80, "app/b.example.com")),
	calls: []gatewayCall{httpCall(8080, "a.example.com"), httpCall(8080, "b.example.com")},
}, {
	name:   "TestHTTPGateway/httpsRedirect without VirtualService",
	config: istioGateway("gateway", "default", plainServer(80, "example.com")+"\ntls: {httpsRedirect: true}"),
	calls:  []gatewayCall{httpCall(8080, "example.com"), httpCall(8080, "other.example.com")},
}, {
	name: "httpsRedirect beside an HTTPS server",
	config: istioGateway("gateway", "default",
		plainServer(80, "example.com", "Www.Example.com")+"\ntls: {httpsRedirect: true}",
		terminatedServer(443, "https", "{mode: SIMPLE, credentialName: cert}", "example.com")),
	calls: []gatewayCall{httpCall(8080, "example.com"), httpCall(8080, "www.example.com"), tlsCall(8443, "example.com")},
}, {
	name:   "SIMPLE with credentialName",
	config: istioGateway("gateway", "default", terminatedServer(443, "https", "{mode: SIMPLE, credentialName: cert}", "example.com")),
	calls:  []gatewayCall{tlsCall(8443, "example.com"), tlsCall(8443, "other.com"), httpCall(8443, "example.com"), mtlsCall(8443, "example.com")},
}, {
	name: "SIMPLE with two credentialNames and the server's TLS versions and ciphers",
	config: istioGateway("gateway", "default", terminatedServer(443, "https",
		"{mode: SIMPLE, credentialNames: [rsa, ecdsa], minProtocolVersion: TLSV1_3, maxProtocolVersion: TLSV1_3, cipherSuites: [ECDHE-RSA-AES128-GCM-SHA256, NOT-A-CIPHER]}", "example.com")),
	calls: []gatewayCall{tlsCall(8443, "example.com")},
}, {
	name: "MUTUAL with subjectAltNames, SPKI and hash pins",
	config: istioGateway("gateway", "default", terminatedServer(443, "https",
		"{mode: MUTUAL, credentialName: cert, subjectAltNames: [client.example.com], verifyCertificateSpki: [NvqYIYSbgK2vCJpQhObf77vv+bQWtc5ek5RIOwPiC9A=], verifyCertificateHash: [df6ff72fe9116521268f6f2dd4966f51df479883fe7037b39f75916ac3049d1a]}", "example.com")),
	calls: []gatewayCall{tlsCall(8443, "example.com"), mtlsCall(8443, "example.com")},
}, {
	name:   "OPTIONAL_MUTUAL with caCertCredentialName",
	config: istioGateway("gateway", "default", terminatedServer(443, "https", "{mode: OPTIONAL_MUTUAL, credentialName: cert, caCertCredentialName: client-ca}", "example.com")),
	calls:  []gatewayCall{tlsCall(8443, "example.com"), mtlsCall(8443, "example.com")},
}, {
	name:   "ISTIO_MUTUAL",
	config: istioGateway("gateway", "default", terminatedServer(443, "https", "{mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/app/sa/sleep]}", "example.com")),
	calls:  []gatewayCall{tlsCall(8443, "example.com"), mtlsCall(8443, "example.com")},
}, {
	name: "files mounted in the gateway pod",
	config: istioGateway("gateway", "default", terminatedServer(443, "https",
		"{mode: MUTUAL, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem, caCrl: /etc/certs/crl.pem}", "example.com")),
	calls: []gatewayCall{tlsCall(8443, "example.com"), mtlsCall(8443, "example.com")},
}, {
	name:                    "OPTIONAL_MUTUAL with insecureSkipVerify, allowed",
	allowInsecureSkipVerify: true,
	config:                  istioGateway("gateway", "default", terminatedServer(443, "https", "{mode: OPTIONAL_MUTUAL, credentialName: cert, insecureSkipVerify: true}", "example.com")),
	calls:                   []gatewayCall{tlsCall(8443, "example.com")},
}, {
	name: "SNI per server: exact, wildcard and catch-all",
	config: istioGateway("gateway", "default",
		terminatedServer(443, "exact", "{mode: SIMPLE, credentialName: exact}", "shop.example.com"),
		terminatedServer(443, "wildcard", "{mode: SIMPLE, credentialName: wildcard}", "*.example.com"),
		terminatedServer(443, "any", "{mode: SIMPLE, credentialName: any}", "*")),
	calls: []gatewayCall{tlsCall(8443, "shop.example.com"), tlsCall(8443, "a.example.com"), tlsCall(8443, "other.org"), tlsCall(8443, "")},
}, {
	name: "hosts of the ns/host forms",
	config: istioGateway("gateway", "default",
		terminatedServer(443, "https", "{mode: SIMPLE, credentialName: cert}", "./a.example.com", "app/b.example.com", "*/c.example.com")),
	calls: []gatewayCall{tlsCall(8443, "a.example.com"), tlsCall(8443, "b.example.com"), tlsCall(8443, "c.example.com"), tlsCall(8443, "d.example.com")},
}, {
	name: "TestGatewayConflicts/duplicate tls host in two Gateways keeps the first",
	config: istioGateway("a", "istio-system", terminatedServer(443, "https", "{mode: SIMPLE, credentialName: a}", "foo.bar")) +
		istioGateway("b", "istio-system", terminatedServer(443, "https", "{mode: SIMPLE, credentialName: b}", "foo.bar")),
	calls: []gatewayCall{tlsCall(8443, "foo.bar")},
}, {
	name: "TestGatewayConflicts/duplicate tls gateway",
	config: istioGateway("gateway", "istio-system", terminatedServer(443, "https-ingress", "{mode: SIMPLE, credentialName: sds-credential}", "./*")) +
		istioGateway("gateway", "default", terminatedServer(443, "https-ingress", "{mode: SIMPLE, credentialName: sds-credential}", "./*")),
	calls: []gatewayCall{tlsCall(8443, "foo.bar")},
}, {
	name: "HTTP and HTTPS servers on one port: the first wins",
	config: istioGateway("gateway", "default",
		plainServer(80, "foo.bar"),
		terminatedServer(80, "https", "{mode: SIMPLE, credentialName: cert}", "foo.bar")),
	calls: []gatewayCall{httpCall(8080, "foo.bar"), tlsCall(8080, "foo.bar")},
}, {
	name: "PASSTHROUGH and TCP servers without routes have no listener",
	config: istioGateway("gateway", "default",
		"port: {number: 443, name: tls, protocol: TLS}\nhosts: [\"*.example.com\"]\ntls: {mode: PASSTHROUGH}",
		"port: {number: 9000, name: tcp, protocol: TCP}\nhosts: [\"*\"]"),
	calls: []gatewayCall{tlsCall(8443, "a.example.com"), tcpCall(9000)},
}, {
	name:         "an unprivileged pod does not listen below 1024",
	unprivileged: true,
	config:       istioGateway("a", "default", plainServer(80, "foo.bar")) + istioGateway("b", "default", plainServer(1000, "foo.bar")),
	calls:        []gatewayCall{httpCall(8080, "foo.bar"), httpCall(1000, "foo.bar")},
}, {
	name: "AuthorizationPolicy and RequestAuthentication selecting the gateway",
	config: istioGateway("gateway", "default",
		plainServer(80, "foo.bar"),
		terminatedServer(443, "https", "{mode: SIMPLE, credentialName: cert}", "foo.bar")),
	policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-range, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-get, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  rules: [{to: [{operation: {methods: [GET]}}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  jwtRules:
  - issuer: https://idp.example
    jwks: '{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
---
`,
	calls: []gatewayCall{httpCall(8080, "foo.bar"), tlsCall(8443, "foo.bar")},
}}

// TestGatewaySimulation runs Istio's simulator on the configuration
// Istio's generator gives the ingress gateway (a router proxy) and on
// ours, for each gateway case, and compares what Envoy would decide for
// each call: the error, listener, kind of filter chain, route
// configuration, virtual host and cluster; then the names of listeners,
// routes and clusters, each cluster's TLS and load assignment, Istio's
// validators on our configuration, and what
// the simulator does not judge: each terminating chain's
// DownstreamTlsContext, SNI match and connection manager, each TCP
// chain's network filters and tcp_proxy destinations (weights), and
// every virtual host's routes (header matches, weights, redirects),
// field by field.
func TestGatewaySimulation(t *testing.T) {
	quietIstioLogs(t)
	if len(gatewayCases) < 30 {
		t.Fatalf("%d gateway cases, want at least 30", len(gatewayCases))
	}
	objects := decodeKube(t, gatewayWorld)
	var gwPod *corev1.Pod
	for _, o := range objects {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "istio-ingressgateway-1" {
			gwPod = p
		}
	}
	used := map[int]bool{}
	ran := 0
	for _, gc := range gatewayCases {
		t.Run(gc.name, func(t *testing.T) {
			ran++
			cfgs, _, err := crd.ParseInputs(gc.config + gc.policies)
			if err != nil {
				t.Fatalf("crd.ParseInputs: %v", err)
			}
			for i := range cfgs {
				cfgs[i].Domain = "cluster.local"
			}
			s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{Configs: cfgs, KubernetesObjectString: gatewayWorld, MeshConfig: gatewayMeshConfig()})
			proxy := istioRouter(s, gwPod, gc.unprivileged)
			istioSim := simulation.NewSimulation(t, s, proxy)
			ours := ourRouterResources(t, ourSnapshot(t, objects, gc.config+gc.policies), gc, gwPod)
			ourSim := *istioSim
			ourSim.Listeners, ourSim.Clusters, ourSim.Routes = ours.listeners, ours.clusters, ours.routes

			d := &gatewayDiffs{differences: differences{t: t, scenario: gc.name, used: used, list: gatewayAllowedDifferences}}
			xdstest.ValidateListeners(t, ours.listeners)
			xdstest.ValidateClusters(t, ours.clusters)
			xdstest.ValidateRouteConfigurations(t, ours.routes)
			compareResourceNames(&d.differences, istioSim, &ourSim)
			// The outbound clusters are a sidecar's, with auto-mTLS.
			compareClusterTLS(&d.differences, istioSim, &ourSim)
			compareEndpoints(&d.differences, s.Endpoints(proxy), ours.endpoints)
			for _, c := range gc.calls {
				want, got := simulate(istioSim, c.call), simulate(&ourSim, c.call)
				d.check("call "+c.name, gatewayDecision(want), gatewayDecision(got), "")
			}
			compareGatewayListeners(d, istioSim, &ourSim)
			compareGatewayRoutes(d, istioSim, &ourSim)
			d.logAllowed()
		})
	}
	if ran == len(gatewayCases) {
		for i, a := range gatewayAllowedDifferences {
			if !used[i] {
				t.Errorf("allowed difference %d (%s) no longer occurs; delete it", i, a.reason)
			}
		}
	}
}

type gatewayDiffs struct{ differences }

// gatewayDecision is decision plus what gateways' names make comparable:
// the route configuration and virtual host matched.
func gatewayDecision(o outcome) string {
	return fmt.Sprintf("%s, route config %q, virtual host %q", o.decision.String(), o.result.RouteConfigMatched, o.result.VirtualHostMatched)
}

// gatewayMeshConfig is Istio's default mesh configuration with the
// gateway cases' tlsDefaults and gateway topology.
func gatewayMeshConfig() *meshconfig.MeshConfig {
	m := mesh.DefaultMeshConfig()
	m.TlsDefaults = &meshconfig.MeshConfig_TLSConfig{EcdhCurves: gatewayCurves, CipherSuites: gatewayCiphers}
	m.DefaultConfig.GatewayTopology = &meshconfig.Topology{NumTrustedProxies: gatewayTrustedProxies}
	return m
}

// istioRouter is the ingress gateway pod's proxy as Istio knows it: node
// type router, with the pod's labels and address, from which Istio finds
// the Services selecting it and so translates server ports.
func istioRouter(s *xds.FakeDiscoveryServer, pod *corev1.Pod, unprivileged bool) *istiomodel.Proxy {
	md := &istiomodel.NodeMetadata{
		Namespace:      pod.Namespace,
		ServiceAccount: pod.Spec.ServiceAccountName,
		Labels:         pod.Labels,
	}
	if unprivileged {
		md.UnprivilegedPod = "true"
	}
	return s.SetupProxy(&istiomodel.Proxy{
		Type:            istiomodel.Router,
		ID:              pod.Name + "." + pod.Namespace,
		ConfigNamespace: pod.Namespace,
		IPAddresses:     []string{pod.Status.PodIP},
		Labels:          pod.Labels,
		Metadata:        md,
	})
}

// ourRouterResources is what envoygen gives the gateway pod in snap
// (kubesource's snapshot of gatewayWorld and the case's Istio objects).
func ourRouterResources(t *testing.T, snap *model.Snapshot, gc gatewayCase, pod *corev1.Pod) *sidecarResources {
	t.Helper()
	g, p := ourRouterSetup(gc, pod)
	return ourResources(t, g, snap, p)
}

// ourRouterSetup is the generator of the case, with the mesh settings
// gatewayMeshConfig gives Istio, and the gateway pod's router proxy.
func ourRouterSetup(gc gatewayCase, pod *corev1.Pod) (*envoygen.Generator, *envoygen.Proxy) {
	g := &envoygen.Generator{
		TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain),
		Mesh: envoygen.Mesh{
			AllowInsecureSkipVerify: gc.allowInsecureSkipVerify,
			TLSDefaults:             envoygen.TLSDefaults{ECDHCurves: gatewayCurves, CipherSuites: gatewayCiphers},
			GatewayTopology:         envoygen.GatewayTopology{NumTrustedProxies: gatewayTrustedProxies},
		},
	}
	p := &envoygen.Proxy{Namespace: pod.Namespace, Labels: pod.Labels, IPs: []string{pod.Status.PodIP}, Router: true, Unprivileged: gc.unprivileged}
	return g, p
}

// gatewayAllowedDifferences are the gateway cases' intended differences
// from Istio. Every entry must still occur (checked when every case
// runs).
var gatewayAllowedDifferences = []allowedDifference{
	{
		scenario: regexp.MustCompile(`^TestGatewayConflicts/duplicate tls gateway$`),
		subject:  regexp.MustCompile(`^call https foo\.bar:8443$`),
		istio:    `multiple filter chains matched, listener "0.0.0.0_8443", chain -, cluster "", route config "", virtual host ""`,
		ours:     `no route matched, listener "0.0.0.0_8443", chain TLS/HTTP, cluster "", route config "https.443.https-ingress.gateway.default", virtual host "blackhole:443"`,
		reason:   "Istio sends two chains Envoy cannot tell apart (its issue 24638: Envoy refuses the listener); Bulwark keeps the first Gateway's server and reports the other",
	},
	{
		scenario: regexp.MustCompile(`^TestGatewayConflicts/duplicate tls gateway$`),
		subject:  regexp.MustCompile(`^chains of 0\.0\.0\.0_8443$`),
		istio:    `[https.443.https-ingress.gateway.default https.443.https-ingress.gateway.istio-system]`,
		ours:     `[https.443.https-ingress.gateway.default]`,
		reason:   "the second of two chains Envoy cannot tell apart is left out",
	},
	{
		scenario: regexp.MustCompile(`^TestGatewayConflicts/duplicate tls gateway$`),
		subject:  regexp.MustCompile(`^route https\.443\.https-ingress\.gateway\.istio-system$`),
		istio:    "present", ours: "absent",
		reason: "the route of a server left out is not generated",
	},
}
