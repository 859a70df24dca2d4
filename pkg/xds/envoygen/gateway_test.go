package envoygen

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// ingressManifests add the gateway Service of Istio's legacy
// istio-ingressgateway chart (80→8080, 443→8443) to the mesh.
const ingressManifests = manifests + `---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.0.99
  selector: {istio: ingressgateway}
  ports:
  - {name: http2, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
`

var ingressLabels = map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}

func ingress() *Proxy {
	return &Proxy{Namespace: "istio-system", Labels: ingressLabels, IPs: []string{"10.0.9.1"}, Router: true}
}

// withGateways is snap with gws as its Gateways; the first is the oldest.
func withGateways(snap *model.Snapshot, gws ...*model.Gateway) *model.Snapshot {
	res := *snap.Resources()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, gw := range gws {
		if gw.Created.IsZero() {
			gw.Created = base.Add(time.Duration(i) * time.Minute)
		}
	}
	res.Gateways = gws
	return model.BuildShared(snap.Version+"+gw", snap.Options, res, nil)
}

func gateway(ns, name string, selector map[string]string, servers ...*networkingv1.Server) *model.Gateway {
	return &model.Gateway{Meta: model.Meta{Namespace: ns, Name: name}, Spec: &networkingv1.Gateway{Selector: selector, Servers: servers}}
}

func httpServer(port uint32, hosts ...string) *networkingv1.Server {
	return &networkingv1.Server{Port: &networkingv1.Port{Number: port, Name: "http", Protocol: "HTTP"}, Hosts: hosts}
}

func httpsServer(port uint32, name string, tls *networkingv1.ServerTLSSettings, hosts ...string) *networkingv1.Server {
	return &networkingv1.Server{Port: &networkingv1.Port{Number: port, Name: name, Protocol: "HTTPS"}, Hosts: hosts, Tls: tls}
}

func simple(credential string) *networkingv1.ServerTLSSettings {
	return &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialName: credential}
}

var ingressSelector = map[string]string{"istio": "ingressgateway"}

// gatewayHCMOf is the HTTP connection manager of a chain.
func gatewayHCMOf(t *testing.T, fc *listener.FilterChain) *hcm.HttpConnectionManager {
	t.Helper()
	for _, f := range fc.GetFilters() {
		if f.GetName() == hcmFilterName {
			m := &hcm.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("chain %v has no HTTP connection manager", fc)
	return nil
}

func downstreamTLS(t *testing.T, fc *listener.FilterChain) *tlsv3.DownstreamTlsContext {
	t.Helper()
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatalf("chain %v: %v", fc.GetFilterChainMatch(), err)
	}
	return ctx
}

func listenerFilterNames(l *listener.Listener) []string {
	var out []string
	for _, f := range l.GetListenerFilters() {
		out = append(out, f.GetName())
	}
	return out
}

func TestRouterServesItsGateways(t *testing.T) {
	snap := withGateways(modeltest.Load(t, ingressManifests),
		gateway("istio-system", "public", ingressSelector,
			httpServer(80, "*"),
			httpsServer(443, "https", simple("public-cert"), "shop.example.com", "*.shop.example.com")),
		gateway("app", "echo", ingressSelector,
			httpServer(80, "app/echo.example.com"),
			httpsServer(443, "https-echo", simple("echo-cert"), "app/echo.example.com")))
	g := &Generator{TrustDomain: td, Mesh: Mesh{GatewayTopology: GatewayTopology{NumTrustedProxies: 2}}}
	c := generate(t, g, snap, ingress())

	if got := keys(c.listeners); !slices.Equal(got, []string{"0.0.0.0_8080", "0.0.0.0_8443"}) {
		t.Fatalf("listeners %v, want the target ports of the gateway Service", got)
	}
	plain := c.listeners["0.0.0.0_8080"]
	if len(plain.GetFilterChains()) != 1 || len(plain.GetListenerFilters()) != 0 {
		t.Fatalf("0.0.0.0_8080: want one chain shared by both HTTP servers and no listener filter, got %s", prototext.Format(plain))
	}
	m := gatewayHCMOf(t, plain.GetFilterChains()[0])
	if m.GetRds().GetRouteConfigName() != "http.8080" {
		t.Errorf("plaintext route %q, want http.8080", m.GetRds().GetRouteConfigName())
	}
	if !m.GetUseRemoteAddress().GetValue() || m.GetXffNumTrustedHops() != 2 ||
		m.GetForwardClientCertDetails() != hcm.HttpConnectionManager_SANITIZE_SET ||
		!proto.Equal(m.GetSetCurrentClientCertDetails(), &hcm.HttpConnectionManager_SetCurrentClientCertDetails{Subject: wrapperspb.Bool(true), Cert: true, Dns: true, Uri: true}) {
		t.Errorf("gateway connection manager: %s", prototext.Format(m))
	}

	secure := c.listeners["0.0.0.0_8443"]
	if got := listenerFilterNames(secure); !slices.Equal(got, []string{tlsInspectorName}) {
		t.Errorf("0.0.0.0_8443 listener filters %v, want the TLS inspector", got)
	}
	byRoute := map[string]*listener.FilterChain{}
	for _, fc := range secure.GetFilterChains() {
		byRoute[gatewayHCMOf(t, fc).GetRds().GetRouteConfigName()] = fc
	}
	for route, want := range map[string]struct {
		sni  []string
		cert string
	}{
		"https.443.https.public.istio-system": {[]string{"*.shop.example.com", "shop.example.com"}, "kubernetes://public-cert"},
		"https.443.https-echo.echo.app":       {[]string{"echo.example.com"}, "kubernetes://echo-cert"},
	} {
		fc := byRoute[route]
		if fc == nil {
			t.Errorf("no chain routing by %s; have %v", route, keys(byRoute))
			continue
		}
		if got := fc.GetFilterChainMatch().GetServerNames(); !slices.Equal(got, want.sni) {
			t.Errorf("%s: server names %v, want %v", route, got, want.sni)
		}
		ctx := downstreamTLS(t, fc)
		if got := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(); len(got) != 1 || got[0].GetName() != want.cert || got[0].GetSdsConfig().GetAds() == nil {
			t.Errorf("%s: certificate %v, want %s over ADS", route, got, want.cert)
		}
		if ctx.GetRequireClientCertificate().GetValue() || ctx.GetCommonTlsContext().GetValidationContextType() != nil {
			t.Errorf("%s: SIMPLE asks for client certificates: %s", route, prototext.Format(ctx))
		}
	}

	if got := keys(c.routes); !slices.Equal(got, []string{"http.8080", "https.443.https-echo.echo.app", "https.443.https.public.istio-system"}) {
		t.Fatalf("routes %v", got)
	}
	for name, rc := range c.routes {
		want := "blackhole:443"
		if name == "http.8080" {
			want = "blackhole:80"
		}
		if vh := rc.GetVirtualHosts(); len(vh) != 1 || vh[0].GetName() != want || len(vh[0].GetRoutes()) != 0 || !slices.Equal(vh[0].GetDomains(), []string{"*"}) {
			t.Errorf("route %s: want only %s, without routes (404), got %v", name, want, vh)
		}
	}

	if c.clusters[blackholeCluster] == nil || c.clusters[resource.ClusterName("echo.app.svc.cluster.local", "", 80)] == nil {
		t.Errorf("clusters %v: want the outbound ones and BlackHoleCluster", keys(c.clusters))
	}
	for name := range c.clusters {
		if strings.HasPrefix(name, "inbound|") || name == passthroughCluster || name == inboundPassthroughCluster {
			t.Errorf("a router has cluster %s", name)
		}
	}
	if c.endpoints[resource.ClusterName("echo.app.svc.cluster.local", "", 80)] == nil {
		t.Error("no load assignment of the outbound cluster")
	}
	if ps := g.GatewayProblems(snap, ingress()); len(ps) != 0 {
		t.Errorf("problems %v", ps)
	}
}

func TestGatewaySelection(t *testing.T) {
	base := modeltest.Load(t, ingressManifests)
	for name, tc := range map[string]struct {
		gw      *model.Gateway
		scoped  bool
		serving bool
	}{
		"a selector the labels match applies":                      {gateway("istio-system", "gw", ingressSelector, httpServer(80, "*")), false, true},
		"a selector the labels do not match does not":              {gateway("istio-system", "gw", map[string]string{"istio": "egress"}, httpServer(80, "*")), false, false},
		"no selector applies to every router":                      {gateway("istio-system", "gw", nil, httpServer(80, "*")), false, true},
		"another namespace's Gateway applies, as in Istio":         {gateway("app", "gw", ingressSelector, httpServer(80, "*")), false, true},
		"another namespace's Gateway does not when scoped":         {gateway("app", "gw", ingressSelector, httpServer(80, "*")), true, false},
		"the router's own namespace's Gateway applies when scoped": {gateway("istio-system", "gw", ingressSelector, httpServer(80, "*")), true, true},
	} {
		t.Run(name, func(t *testing.T) {
			snap := withGateways(base, tc.gw)
			c := generate(t, &Generator{TrustDomain: td, ScopeGatewayToNamespace: tc.scoped}, snap, ingress())
			if got := c.listeners["0.0.0.0_8080"] != nil; got != tc.serving {
				t.Errorf("serving %v, want %v (listeners %v)", got, tc.serving, keys(c.listeners))
			}
		})
	}
}

func TestPortsWithoutServiceAndUnprivilegedPods(t *testing.T) {
	snap := withGateways(modeltest.Load(t, ingressManifests), gateway("istio-system", "gw", ingressSelector,
		httpServer(80, "*"), httpServer(8081, "*"), httpServer(1000, "*")))
	p := ingress()
	c := generate(t, &Generator{TrustDomain: td}, snap, p)
	if got := keys(c.listeners); !slices.Equal(got, []string{"0.0.0.0_1000", "0.0.0.0_8080", "0.0.0.0_8081"}) {
		t.Errorf("listeners %v: a port no Service translates is listened on as it is", got)
	}
	p.Unprivileged = true
	c = generate(t, &Generator{TrustDomain: td}, snap, p)
	if got := keys(c.listeners); !slices.Equal(got, []string{"0.0.0.0_8080", "0.0.0.0_8081"}) {
		t.Errorf("unprivileged: listeners %v, want none below 1024", got)
	}
	if _, ok := c.routes["http.1000"]; ok {
		t.Error("unprivileged: route of a skipped port")
	}
}

func TestHTTPSRedirect(t *testing.T) {
	redirect := httpServer(80, "Shop.example.com", "app/echo.example.com")
	redirect.Tls = &networkingv1.ServerTLSSettings{HttpsRedirect: true}
	snap := withGateways(modeltest.Load(t, ingressManifests), gateway("istio-system", "gw", ingressSelector, redirect, httpServer(80, "other.example.com")))
	c := generate(t, &Generator{TrustDomain: td}, snap, ingress())
	vhs := c.routes["http.8080"].GetVirtualHosts()
	var got []string
	for _, vh := range vhs {
		if vh.GetRequireTls() != route.VirtualHost_ALL || len(vh.GetRoutes()) != 0 {
			t.Errorf("virtual host %s does not redirect to HTTPS: %s", vh.GetName(), prototext.Format(vh))
		}
		got = append(got, vh.GetName()+"="+strings.Join(vh.GetDomains(), ","))
	}
	// Hosts with equal routes share a virtual host, named after the most
	// specific, as Istio collapses them.
	if want := []string{"echo.example.com:80=echo.example.com,shop.example.com"}; !slices.Equal(got, want) {
		t.Errorf("virtual hosts %v, want %v", got, want)
	}
}

func TestConflictingServersKeepTheOldest(t *testing.T) {
	base := modeltest.Load(t, ingressManifests)
	for name, tc := range map[string]struct {
		older, newer *networkingv1.Server
		wantChains   int
	}{
		"same SNI names":        {httpsServer(443, "a", simple("a"), "shop.example.com"), httpsServer(443, "b", simple("b"), "shop.example.com"), 1},
		"one SNI name shared":   {httpsServer(443, "a", simple("a"), "a.example.com", "shop.example.com"), httpsServer(443, "b", simple("b"), "app/shop.example.com", "b.example.com"), 1},
		"two catch-all servers": {httpsServer(443, "a", simple("a"), "*"), httpsServer(443, "b", simple("b"), "*/*"), 1},
		"HTTPS on an HTTP port": {httpServer(443, "*"), httpsServer(443, "b", simple("b"), "shop.example.com"), 1},
		"distinct SNI names":    {httpsServer(443, "a", simple("a"), "a.example.com"), httpsServer(443, "b", simple("b"), "b.example.com"), 2},
	} {
		t.Run(name, func(t *testing.T) {
			older := gateway("istio-system", "older", ingressSelector, tc.older)
			newer := gateway("app", "newer", ingressSelector, tc.newer)
			// Listed newest first: the order of creation decides.
			snap := withGateways(base, newer, older)
			newer.Created, older.Created = time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			g := &Generator{TrustDomain: td}
			c := generate(t, g, snap, ingress()) // every listener validates
			l := c.listeners["0.0.0.0_8443"]
			if got := len(l.GetFilterChains()); got != tc.wantChains {
				t.Fatalf("%d chains, want %d: %s", got, tc.wantChains, prototext.Format(l))
			}
			if tc.older.GetTls() != nil {
				if got := gatewayHCMOf(t, l.GetFilterChains()[0]).GetRds().GetRouteConfigName(); got != "https.443.a.older.istio-system" {
					t.Errorf("first chain routes by %s, want the older Gateway's", got)
				}
			}
			ps := g.GatewayProblems(snap, ingress())
			switch {
			case tc.wantChains == 2 && len(ps) != 0:
				t.Errorf("problems %v", ps)
			case tc.wantChains == 1 && (len(ps) != 1 || ps[0].Name != "newer" || ps[0].Kind() != ProblemConflict):
				t.Errorf("problems %v, want the newer Gateway's server reported as a conflict", ps)
			}
		})
	}
}

func TestInvalidServersLeaveTheRestServing(t *testing.T) {
	base := modeltest.Load(t, ingressManifests)
	many := make([]string, maxServerHosts+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	for name, srv := range map[string]*networkingv1.Server{
		"a host with a control character": httpsServer(443, "bad", simple("c"), "bad\x00.example.com"),
		"a host too long":                 httpsServer(443, "bad", simple("c"), strings.Repeat("a", maxHostLen+1)),
		"too many hosts":                  httpsServer(443, "bad", simple("c"), many...),
		"no hosts":                        httpsServer(443, "bad", simple("c")),
		"no port":                         {Hosts: []string{"bad.example.com"}},
		"HTTPS without tls":               httpsServer(443, "bad", nil, "bad.example.com"),
		"HTTPS without port name":         httpsServer(443, "", simple("c"), "bad.example.com"),
		"a bind address (not served)":     {Port: &networkingv1.Port{Number: 443, Name: "b", Protocol: "HTTPS"}, Hosts: []string{"bad.example.com"}, Bind: "10.0.0.1", Tls: simple("c")},
	} {
		t.Run(name, func(t *testing.T) {
			snap := withGateways(base, gateway("istio-system", "gw", ingressSelector, srv, httpsServer(443, "good", simple("good"), "good.example.com")))
			g := &Generator{TrustDomain: td}
			c := generate(t, g, snap, ingress())
			if chains := c.listeners["0.0.0.0_8443"].GetFilterChains(); len(chains) != 1 {
				t.Errorf("%d chains, want the good server's alone", len(chains))
			}
			if ps := g.GatewayProblems(snap, ingress()); len(ps) != 1 {
				t.Errorf("problems %v, want one", ps)
			}
		})
	}
}

func TestRefusedServerTLSLeavesTheRestServing(t *testing.T) {
	base := modeltest.Load(t, ingressManifests)
	insecure := &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_OPTIONAL_MUTUAL, CredentialName: "c", InsecureSkipVerify: wrapperspb.Bool(true)}
	for name, tc := range map[string]struct {
		tls  *networkingv1.ServerTLSSettings
		kind string
	}{
		"SIMPLE without certificate":       {&networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE}, ProblemInvalid},
		"ISTIO_MUTUAL with a credential":   {&networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_ISTIO_MUTUAL, CredentialName: "c"}, ProblemInvalid},
		"three credentialNames":            {&networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialNames: []string{"a", "b", "c"}}, ProblemInvalid},
		"an external SDS credential":       {simple("sds://vault"), ProblemUnsupported},
		"insecureSkipVerify without leave": {insecure, ProblemRefused},
		"a file path with the separator":   {&networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, ServerCertificate: "/a~b", PrivateKey: "/k"}, ProblemInvalid},
		"another namespace's Secret":       {simple("app/c"), ProblemRefused},
		"another namespace's CA Secret":    {&networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_MUTUAL, CredentialName: "c", CaCertCredentialName: "kubernetes://app/ca"}, ProblemRefused},
		"a malformed certificate hash":     {&networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_MUTUAL, CredentialName: "c", VerifyCertificateHash: []string{"x"}}, ProblemInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			snap := withGateways(base, gateway("istio-system", "gw", ingressSelector,
				httpsServer(443, "bad", tc.tls, "bad.example.com"),
				httpsServer(443, "good", simple("good"), "good.example.com")))
			g := &Generator{TrustDomain: td}
			c := generate(t, g, snap, ingress())
			chains := c.listeners["0.0.0.0_8443"].GetFilterChains()
			if len(chains) != 1 || !slices.Equal(chains[0].GetFilterChainMatch().GetServerNames(), []string{"good.example.com"}) {
				t.Errorf("chains: want the good server's alone, got %d", len(chains))
			}
			if ps := g.GatewayProblems(snap, ingress()); len(ps) != 1 || ps[0].Kind() != tc.kind {
				t.Errorf("problems %v, want one %s", ps, tc.kind)
			}
		})
	}
	// With the operator's leave, insecureSkipVerify is Istio's ACCEPT_UNTRUSTED.
	snap := withGateways(base, gateway("istio-system", "gw", ingressSelector, httpsServer(443, "x", insecure, "x.example.com")))
	c := generate(t, &Generator{TrustDomain: td, Mesh: Mesh{AllowInsecureSkipVerify: true}}, snap, ingress())
	ctx := downstreamTLS(t, c.listeners["0.0.0.0_8443"].GetFilterChains()[0])
	if ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetTrustChainVerification() != tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED {
		t.Errorf("insecureSkipVerify allowed: %s", prototext.Format(ctx))
	}
}

func TestGatewayPoliciesOnEveryChain(t *testing.T) {
	policies := ingressManifests + `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ingress, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: CUSTOM
  provider: {name: ext}
  rules: [{to: [{operation: {paths: [/ext]}}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  jwtRules: [{issuer: "https://idp.example", jwksUri: "https://idp.example/keys"}]
`
	snap := withGateways(modeltest.Load(t, policies), gateway("istio-system", "gw", ingressSelector,
		httpServer(80, "*"), httpsServer(443, "https", simple("c"), "*")))
	c := generate(t, &Generator{TrustDomain: td, Keys: keysOf(echoJWKS)}, snap, ingress())
	for _, name := range []string{"0.0.0.0_8080", "0.0.0.0_8443"} {
		for _, fc := range c.listeners[name].GetFilterChains() {
			var got []string
			for _, f := range gatewayHCMOf(t, fc).GetHttpFilters() {
				got = append(got, f.GetName())
			}
			// The CUSTOM refusal, jwt_authn, the DENY policy, then the router.
			want := []string{"envoy.filters.http.rbac", "envoy.filters.http.jwt_authn", "envoy.filters.http.rbac", alpnFilterName, routerFilterName}
			if !slices.Equal(got, want) {
				t.Errorf("%s: HTTP filters %v, want %v", name, got, want)
			}
		}
	}
}

func TestRoutersOfOneScopeShareResourceKeys(t *testing.T) {
	snap := withGateways(modeltest.Load(t, ingressManifests), gateway("istio-system", "gw", ingressSelector, httpServer(80, "*")))
	g := &Generator{TrustDomain: td}
	a, b := ingress(), ingress()
	b.IPs = []string{"10.0.9.2"}
	other := ingress()
	other.Labels = map[string]string{"istio": "ingressgateway", "app": "other"}
	if g.Scope(snap, a) != g.Scope(snap, b) {
		t.Error("two replicas of one gateway have different scopes")
	}
	if g.Scope(snap, a) == g.Scope(snap, other) {
		t.Error("routers with different labels share a scope")
	}
	sidecar := ingress()
	sidecar.Router = false
	if g.Scope(snap, a) == g.Scope(snap, sidecar) {
		t.Error("a router and a sidecar of the same workload share a scope")
	}
	for _, typeURL := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType} {
		if ka, kb := resourceKeys(g.Generate(snap, a, typeURL, nil, true)), resourceKeys(g.Generate(snap, b, typeURL, nil, true)); !slices.Equal(ka, kb) {
			t.Errorf("%s: replicas' keys differ", typeURL)
		}
	}
	if ka, ko := resourceKeys(g.Generate(snap, a, resource.ListenerType, nil, true)), resourceKeys(g.Generate(snap, other, resource.ListenerType, nil, true)); slices.Equal(ka, ko) {
		t.Error("listeners of routers of different scopes share keys")
	}
}

func TestRouterClustersFollowDestinationRules(t *testing.T) {
	rule := ingressManifests + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: istio-system}
spec:
  host: echo.app.svc.cluster.local
  trafficPolicy: {tls: {mode: DISABLE}}
`
	snap := withGateways(modeltest.Load(t, rule), gateway("istio-system", "gw", ingressSelector, httpServer(80, "*")))
	c := generate(t, &Generator{TrustDomain: td}, snap, ingress())
	echo := c.clusters[resource.ClusterName("echo.app.svc.cluster.local", "", 80)]
	other := c.clusters[resource.ClusterName("other.web.svc.cluster.local", "", 80)]
	if echo.GetTransportSocket() != nil || len(echo.GetTransportSocketMatches()) != 0 {
		t.Errorf("DISABLE: echo's cluster has TLS: %s", prototext.Format(echo))
	}
	if len(other.GetTransportSocketMatches()) == 0 && other.GetTransportSocket() == nil {
		t.Errorf("auto-mTLS: other's cluster has no TLS: %s", prototext.Format(other))
	}
	if c.clusters[blackholeCluster].GetType() != cluster.Cluster_STATIC {
		t.Error("BlackHoleCluster")
	}
}

func TestValidServerHost(t *testing.T) {
	for h, want := range map[string]bool{
		"*": true, "*/*": true, "./*": true, "app/*": true, "example.com": true, "example.com.": true, "*.example.com": true,
		"*foo.example.com": true, "*-foo.example.com": true, "app/shop.example.com": true, "*/shop.example.com": true, "localhost": true,
		"": false, "app/": false, "/x": false, "-foo.example.com": false, "foo*.example.com": false, "a.*.example.com": false,
		"a..b": false, "1.2.3.4": false, "a b": false, "a\x00b": false, "App_x/shop": false, "a/b/c": false, strings.Repeat("a", 64) + ".com": false,
	} {
		if got := validServerHost(h); got != want {
			t.Errorf("validServerHost(%q) = %v, want %v", h, got, want)
		}
	}
}
