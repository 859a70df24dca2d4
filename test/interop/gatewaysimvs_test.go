package interop

import (
	"fmt"
	"strings"

	"istio.io/istio/pilot/pkg/simulation"
)

// The gateway cases with VirtualServices: each Gateway "gateway" of
// namespace default selects the ingress gateway, and the
// VirtualServices route to sidecarWorld's services.
func init() {
	gatewayCases = append(gatewayCases, gatewayVSCases...)
}

// virtualService is a VirtualService of namespace ns with spec as YAML
// (indented by two spaces under spec).
func virtualService(name, ns, spec string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: %s, namespace: %s}\nspec:\n", name, ns)
	for _, l := range strings.Split(strings.TrimSpace(spec), "\n") {
		b.WriteString("  " + l + "\n")
	}
	return b.String() + "---\n"
}

func pathCall(port int, host, path string) gatewayCall {
	return gatewayCall{fmt.Sprintf("http %s:%d%s", host, port, path), simulation.Call{Port: port, HostHeader: host, Path: path, Protocol: simulation.HTTP, CallMode: simulation.CallModeGateway}}
}

// sniCall opens TLS with sni and sends opaque TCP (a passthrough or
// terminated TCP server's client).
func sniCall(port int, sni string) gatewayCall {
	return gatewayCall{fmt.Sprintf("tls+tcp %s:%d", sni, port), simulation.Call{Port: port, Sni: sni, Protocol: simulation.TCP, TLS: simulation.TLS, CallMode: simulation.CallModeGateway}}
}

const (
	vsEcho    = "echo.app.svc.cluster.local"
	vsSleep   = "sleep.app.svc.cluster.local"
	vsLegacy  = "legacy.app.svc.cluster.local"
	vsBackend = "backend.other.svc.cluster.local"
)

var gatewayVSCases = []gatewayCase{{
	name: "VirtualService: exact, prefix and regex URI matches",
	config: istioGateway("gateway", "default", plainServer(80, "*.example.com")) + virtualService("shop", "default", `
hosts: [shop.example.com]
gateways: [gateway]
http:
- match: [{uri: {exact: /login}}]
  route: [{destination: {host: `+vsEcho+`}}]
- match: [{uri: {prefix: /api}}]
  route: [{destination: {host: `+vsBackend+`, port: {number: 80}}}]
- match: [{uri: {regex: "/static/[a-z]+\\.css"}}]
  route: [{destination: {host: `+vsSleep+`}}]
- route: [{destination: {host: `+vsLegacy+`, port: {number: 80}}}]`),
	calls: []gatewayCall{pathCall(8080, "shop.example.com", "/login"), pathCall(8080, "shop.example.com", "/login/x"), pathCall(8080, "shop.example.com", "/api/v1"),
		pathCall(8080, "shop.example.com", "/static/a.css"), pathCall(8080, "shop.example.com", "/other"), pathCall(8080, "other.example.com", "/")},
}, {
	name: "VirtualService: wildcard hosts intersected with the server's",
	config: istioGateway("gateway", "default", plainServer(80, "*.example.com", "exact.org")) + virtualService("wide", "default", `
hosts: ["*.shop.example.com", api.example.com, "*.org"]
gateways: [gateway]
http: [{route: [{destination: {host: `+vsEcho+`}}]}]`),
	calls: []gatewayCall{httpCall(8080, "a.shop.example.com"), httpCall(8080, "api.example.com"), httpCall(8080, "exact.org"), httpCall(8080, "other.org"), httpCall(8080, "www.example.com")},
}, {
	name: "VirtualService: server hosts of the ns/host forms admit VirtualServices of those namespaces",
	config: istioGateway("gateway", "default", plainServer(80, "app/a.example.com", "./b.example.com", "*/c.example.com")) +
		virtualService("from-app", "app", `
hosts: [a.example.com, b.example.com, c.example.com]
gateways: [default/gateway]
http: [{route: [{destination: {host: `+vsEcho+`}}]}]`) + virtualService("from-default", "default", `
hosts: [a.example.com, b.example.com]
gateways: [gateway]
http: [{route: [{destination: {host: `+vsSleep+`}}]}]`),
	calls: []gatewayCall{httpCall(8080, "a.example.com"), httpCall(8080, "b.example.com"), httpCall(8080, "c.example.com")},
}, {
	name: "VirtualService: header matches and weights",
	config: istioGateway("gateway", "default", plainServer(80, "shop.example.com")) + virtualService("canary", "default", `
hosts: [shop.example.com]
gateways: [gateway]
http:
- match: [{headers: {x-version: {exact: v2}, x-user: {prefix: test-}}, withoutHeaders: {x-debug: {}}}]
  route:
  - {destination: {host: `+vsEcho+`, port: {number: 80}}, weight: 80}
  - {destination: {host: `+vsLegacy+`, port: {number: 80}}, weight: 20}
- route: [{destination: {host: `+vsSleep+`}}]`),
	calls: []gatewayCall{httpCall(8080, "shop.example.com")},
}, {
	name: "VirtualService: redirect, rewrite and direct response",
	config: istioGateway("gateway", "default", plainServer(80, "shop.example.com")) + virtualService("moves", "default", `
hosts: [shop.example.com]
gateways: [gateway]
http:
- match: [{uri: {prefix: /old}}]
  redirect: {uri: /new, authority: www.example.com, redirectCode: 308}
- match: [{uri: {prefix: /v1}}]
  rewrite: {uri: /v2}
  route: [{destination: {host: `+vsEcho+`}}]
- match: [{uri: {exact: /down}}]
  directResponse: {status: 503, body: {string: maintenance}}`),
	calls: []gatewayCall{pathCall(8080, "shop.example.com", "/old/page"), pathCall(8080, "shop.example.com", "/v1/x"), pathCall(8080, "shop.example.com", "/down"), pathCall(8080, "shop.example.com", "/none")},
}, {
	name: "VirtualService: httpsRedirect on the HTTP server, routes on the HTTPS one",
	config: istioGateway("gateway", "default",
		plainServer(80, "shop.example.com")+"\ntls: {httpsRedirect: true}",
		terminatedServer(443, "https", "{mode: SIMPLE, credentialName: cert}", "shop.example.com")) + virtualService("shop", "default", `
hosts: [shop.example.com]
gateways: [gateway]
http: [{route: [{destination: {host: `+vsEcho+`}}]}]`),
	calls: []gatewayCall{httpCall(8080, "shop.example.com"), tlsCall(8443, "shop.example.com")},
}, {
	name: "VirtualService: PASSTHROUGH routed by sniHosts",
	config: istioGateway("gateway", "default", "port: {number: 443, name: tls, protocol: TLS}\nhosts: [\"*.example.com\"]\ntls: {mode: PASSTHROUGH}") +
		virtualService("passthrough", "default", `
hosts: ["*.example.com"]
gateways: [gateway]
tls:
- match: [{sniHosts: [a.example.com], port: 443}]
  route: [{destination: {host: `+vsEcho+`, port: {number: 80}}}]
- match: [{sniHosts: [b.example.com, c.example.com]}]
  route:
  - {destination: {host: `+vsBackend+`, port: {number: 9090}}, weight: 70}
  - {destination: {host: `+vsLegacy+`, port: {number: 3306}}, weight: 30}
- match: [{sniHosts: [d.example.com], port: 8443}]
  route: [{destination: {host: `+vsSleep+`}}]`),
	calls: []gatewayCall{sniCall(8443, "a.example.com"), sniCall(8443, "b.example.com"), sniCall(8443, "d.example.com"), sniCall(8443, "x.example.com")},
}, {
	name: "VirtualService: PASSTHROUGH SNI names routed twice keep the first",
	config: istioGateway("gateway", "default", "port: {number: 443, name: tls, protocol: TLS}\nhosts: [\"*.example.com\"]\ntls: {mode: PASSTHROUGH}") +
		virtualService("first", "default", `
hosts: [a.example.com]
gateways: [gateway]
tls: [{match: [{sniHosts: [a.example.com]}], route: [{destination: {host: `+vsEcho+`, port: {number: 80}}}]}]`) + virtualService("second", "default", `
hosts: [a.example.com]
gateways: [gateway]
tls: [{match: [{sniHosts: [a.example.com]}], route: [{destination: {host: `+vsSleep+`}}]}]`),
	calls: []gatewayCall{sniCall(8443, "a.example.com")},
}, {
	name: "VirtualService: TLS terminated for TCP",
	config: istioGateway("gateway", "default", "port: {number: 443, name: tls-db, protocol: TLS}\nhosts: [db.example.com]\ntls: {mode: SIMPLE, credentialName: db-cert}") +
		virtualService("db", "default", `
hosts: [db.example.com]
gateways: [gateway]
tcp: [{match: [{port: 443}], route: [{destination: {host: `+vsLegacy+`, port: {number: 3306}}}]}]`),
	calls: []gatewayCall{sniCall(8443, "db.example.com"), sniCall(8443, "other.example.com")},
}, {
	name: "VirtualService: opaque TCP server, network RBAC before tcp_proxy",
	config: istioGateway("gateway", "default", "port: {number: 9000, name: tcp, protocol: TCP}\nhosts: [\"*\"]") +
		virtualService("tcp", "default", `
hosts: ["*"]
gateways: [gateway]
tcp: [{route: [{destination: {host: `+vsBackend+`, port: {number: 9090}}}]}]`),
	policies: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-range, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
---
`,
	calls: []gatewayCall{tcpCall(9000)},
}, {
	name: "VirtualService: two for one host merge in order",
	config: istioGateway("gateway", "default", plainServer(80, "shop.example.com")) + virtualService("a-cart", "default", `
hosts: [shop.example.com]
gateways: [gateway]
http: [{match: [{uri: {prefix: /cart}}], route: [{destination: {host: `+vsEcho+`}}]}]`) + virtualService("b-catalog", "default", `
hosts: [shop.example.com]
gateways: [gateway]
http:
- match: [{uri: {prefix: /catalog}}]
  route: [{destination: {host: `+vsSleep+`}}]
- route: [{destination: {host: `+vsLegacy+`, port: {number: 80}}}]`),
	calls: []gatewayCall{pathCall(8080, "shop.example.com", "/cart"), pathCall(8080, "shop.example.com", "/catalog"), pathCall(8080, "shop.example.com", "/")},
}, {
	name: "VirtualService: bound by ns/name, by short name, and not by another gateway's name",
	config: istioGateway("gateway", "default", plainServer(80, "*")) + virtualService("short", "default", `
hosts: [a.example.com]
gateways: [gateway]
http: [{route: [{destination: {host: `+vsEcho+`}}]}]`) + virtualService("qualified", "app", `
hosts: [b.example.com]
gateways: [default/gateway]
http: [{route: [{destination: {host: `+vsSleep+`}}]}]`) + virtualService("elsewhere", "app", `
hosts: [c.example.com]
gateways: [gateway]
http: [{route: [{destination: {host: `+vsLegacy+`, port: {number: 80}}}]}]`) + virtualService("mesh-only", "default", `
hosts: [d.example.com]
http: [{route: [{destination: {host: `+vsLegacy+`, port: {number: 80}}}]}]`),
	calls: []gatewayCall{httpCall(8080, "a.example.com"), httpCall(8080, "b.example.com"), httpCall(8080, "c.example.com"), httpCall(8080, "d.example.com")},
}, {
	name: "VirtualService: exportTo hides one from the gateway's namespace",
	config: istioGateway("gateway", "default", plainServer(80, "*")) + virtualService("private", "app", `
hosts: [a.example.com]
gateways: [default/gateway]
exportTo: ["."]
http: [{route: [{destination: {host: `+vsEcho+`}}]}]`) + virtualService("to-gateway", "app", `
hosts: [b.example.com]
gateways: [default/gateway]
exportTo: [istio-system]
http: [{route: [{destination: {host: `+vsSleep+`}}]}]`),
	calls: []gatewayCall{httpCall(8080, "a.example.com"), httpCall(8080, "b.example.com")},
}, {
	name: "VirtualService: an HTTPS server's own route configuration",
	config: istioGateway("gateway", "default",
		terminatedServer(443, "https-a", "{mode: SIMPLE, credentialName: a}", "a.example.com"),
		terminatedServer(443, "https-b", "{mode: SIMPLE, credentialName: b}", "b.example.com")) + virtualService("both", "default", `
hosts: [a.example.com, b.example.com]
gateways: [gateway]
http:
- match: [{uri: {prefix: /api}, port: 443}]
  route: [{destination: {host: `+vsEcho+`}}]
  retries: {attempts: 2, perTryTimeout: 1s, retryOn: 5xx}
  timeout: 5s`),
	calls: []gatewayCall{tlsCall(8443, "a.example.com"), tlsCall(8443, "b.example.com")},
}}
