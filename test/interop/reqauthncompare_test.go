package interop

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	istiomodel "istio.io/istio/pilot/pkg/model"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz/rbactest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/reqauthn"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/google/go-cmp/cmp"
)

// reqAuthnCase is Istio configuration (RequestAuthentications and
// AuthorizationPolicies) for the sidecar of app/echo-1. In it, ISSUER is
// the URL of a loopback issuer serving JWKS at /keys, and its discovery
// document; INLINE is a key set to write inline.
type reqAuthnCase struct {
	istio string
	// uniform: every request is decided alike; otherwise the matrix must
	// hold both decisions.
	uniform bool
	// fetchFails: a key set cannot be fetched. Istio inlines its
	// PublicOnlyJwks there, Bulwark keyfetch.RejectAllJWKS (reqauthn's
	// doc.go): the jwt_authn configurations are compared with that one
	// substitution.
	fetchFails bool
	// noJWT: no RequestAuthentication selects echo.
	noJWT bool
}

const (
	raEcho = `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  jwtRules:
  - issuer: testing@secure.istio.io
    jwks: 'INLINE'
`
	raTwoIssuers = `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: idp1, namespace: app}
spec:
  jwtRules: [{issuer: "https://idp1.example.com", jwks: 'INLINE', audiences: [web]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: idp2, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  jwtRules: [{issuer: "https://idp2.example.com/realms/x", jwks: 'INLINE'}]
`
)

func ap(spec string) string {
	return "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ap, namespace: app}\nspec:\n" + spec
}

func ap2(spec string) string {
	return "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ap2, namespace: app}\nspec:\n" + spec
}

// reqAuthnCases are Istio's documented RequestAuthentication examples and
// the forms requestPrincipals and request.auth.* conditions take.
var reqAuthnCases = map[string]reqAuthnCase{
	"the documented require-JWT policy: ALLOW requestPrincipals *": {istio: raEcho + ap(`
  selector: {matchLabels: {app: echo}}
  rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]
`)},
	"the documented deny-without-JWT policy: DENY notRequestPrincipals *": {istio: raEcho + ap(`
  action: DENY
  rules: [{from: [{source: {notRequestPrincipals: ["*"]}}]}]
`)},
	"the documented exact request principal": {istio: raEcho + ap(`
  rules: [{from: [{source: {requestPrincipals: ["testing@secure.istio.io/testing@secure.istio.io"]}}]}]
`)},
	"the documented group claim condition": {istio: raEcho + ap(`
  rules:
  - from: [{source: {requestPrincipals: ["testing@secure.istio.io/testing@secure.istio.io"]}}]
    when: [{key: "request.auth.claims[groups]", values: [group1]}]
`)},
	"a request principal per path": {istio: raEcho + ap(`
  rules:
  - to: [{operation: {paths: [/healthz]}}]
  - from: [{source: {requestPrincipals: ["*"]}}]
    to: [{operation: {paths: ["/admin*"], methods: [GET]}}]
`)},
	"two issuers, principals of each": {istio: raTwoIssuers + ap(`
  rules: [{from: [{source: {requestPrincipals: ["https://idp1.example.com/alice", "https://idp2.example.com/realms/x/*"]}}]}]
`)},
	"two issuers, an issuer URL with a path split at its last slash": {istio: raTwoIssuers + ap(`
  rules: [{from: [{source: {requestPrincipals: ["https://idp2.example.com/realms/x/bob"]}}]}]
`)},
	"request principals by issuer suffix and subject prefix": {istio: raTwoIssuers + ap(`
  rules: [{from: [{source: {requestPrincipals: ["*.example.com/alice", "https://idp2.example.com/realms/x/b*"]}}]}]
`)},
	"request principals by subject suffix and issuer prefix": {istio: raTwoIssuers + ap(`
  rules: [{from: [{source: {requestPrincipals: ["*ice", "https://idp2*"]}}]}]
`)},
	"notRequestPrincipals in an ALLOW": {istio: raTwoIssuers + ap(`
  rules: [{from: [{source: {notRequestPrincipals: ["https://idp1.example.com/*"]}}]}]
`)},
	"a DENY on one request principal spares requests without a token": {istio: raTwoIssuers + ap(`
  action: DENY
  rules: [{from: [{source: {requestPrincipals: ["https://idp2.example.com/realms/x/bob"]}}]}]
`)},
	"a claim with dots in its name, nested": {istio: raTwoIssuers + ap(`
  rules: [{when: [{key: "request.auth.claims[kubernetes.io][namespace]", values: [app]}]}]
`)},
	"a claim whose value is an array": {istio: raTwoIssuers + ap(`
  rules: [{when: [{key: "request.auth.claims[groups]", values: [admin]}]}]
`)},
	"a claim with a dotted name at the top": {istio: raTwoIssuers + ap(`
  rules: [{when: [{key: "request.auth.claims[email.verified]", values: ["yes"]}]}]
`)},
	"a DENY when a claim is not among values": {istio: raTwoIssuers + ap(`
  action: DENY
  rules: [{when: [{key: "request.auth.claims[groups]", notValues: [dev]}], to: [{operation: {paths: ["/admin*"]}}]}]
`)},
	"audiences and presenter conditions": {istio: raTwoIssuers + ap(`
  rules:
  - when: [{key: request.auth.audiences, values: [web]}, {key: request.auth.presenter, values: ["sp*"]}]
  - when: [{key: request.auth.principal, values: ["https://idp2.example.com/realms/x/bob"]}]
`)},
	"space-delimited scope claim split into a list": {istio: raTwoIssuers + ap(`
  rules: [{when: [{key: "request.auth.claims[scope]", values: [write]}]}]
`)},
	"request principals together with peer identity": {istio: raTwoIssuers + ap(`
  rules: [{from: [{source: {requestPrincipals: ["*"], principals: [cluster.local/ns/app/sa/sleep-sa]}}]}]
`)},
	"ALLOW and DENY with request principals together": {istio: raTwoIssuers + ap(`
  rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]
`) + ap2(`
  action: DENY
  rules: [{from: [{source: {requestPrincipals: ["*/bob"]}}], to: [{operation: {methods: [POST]}}]}]
`)},
	"the token's outputs and locations": {istio: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  jwtRules:
  - issuer: "https://idp1.example.com"
    jwks: 'INLINE'
    audiences: [web, api]
    fromHeaders: [{name: x-jwt-assertion, prefix: "Bearer "}, {name: authorization, prefix: "Bearer "}]
    fromParams: [access_token, token]
    fromCookies: [session]
    outputPayloadToHeader: x-jwt-payload
    outputClaimToHeaders: [{header: x-jwt-sub, claim: sub}]
    forwardOriginalToken: true
    spaceDelimitedClaims: [roles]
` + ap(`
  rules: [{from: [{source: {requestPrincipals: ["https://idp1.example.com/*"]}}]}]
`)},
	"a key set fetched at its jwksUri": {istio: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  jwtRules: [{issuer: "https://idp1.example.com", jwksUri: "ISSUER/keys"}]
` + ap(`
  rules: [{from: [{source: {requestPrincipals: ["https://idp1.example.com/*"]}}]}]
`)},
	"a key set found by OIDC discovery": {istio: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  jwtRules: [{issuer: "ISSUER"}]
` + ap(`
  rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]
`)},
	"a key set that cannot be fetched rejects every token": {fetchFails: true, istio: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  jwtRules: [{issuer: "https://idp1.example.com", jwksUri: "ISSUER/missing"}]
` + ap(`
  action: DENY
  rules: [{from: [{source: {requestPrincipals: ["*/bob"]}}]}]
`)},
	"a mesh-wide RequestAuthentication of the root namespace": {istio: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: mesh, namespace: istio-system}
spec:
  jwtRules: [{issuer: "https://idp1.example.com", jwks: 'INLINE'}]
` + ap(`
  rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]
`)},
	"a RequestAuthentication alone decides nothing": {uniform: true, istio: raTwoIssuers},
	"a RequestAuthentication of another workload: requestPrincipals match nothing": {noJWT: true, uniform: true, istio: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: sleep}}
  jwtRules: [{issuer: "https://idp1.example.com", jwks: 'INLINE'}]
` + ap(`
  rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]
`)},
}

// jwtTokens are the verified tokens of the request matrix: the payload
// jwt_authn leaves in metadata (space-delimited claims already split), or
// nil for a request without a token.
var jwtTokens = []map[string]any{
	nil,
	{"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io", "groups": []any{"group1", "group2"}},
	{"iss": "https://idp1.example.com", "sub": "alice", "aud": []any{"web"}, "azp": "spa", "groups": []any{"admin", "dev"},
		"kubernetes.io": map[string]any{"namespace": "app"}, "email.verified": "yes", "scope": []any{"read", "write"}},
	{"iss": "https://idp2.example.com/realms/x", "sub": "bob", "aud": "api", "groups": "dev",
		"kubernetes.io": map[string]any{"namespace": "other"}, "scope": []any{"read"}},
}

func reqAuthnRequests() []rbactest.Request {
	var out []rbactest.Request
	for _, tok := range jwtTokens {
		for _, id := range []string{"", "spiffe://cluster.local/ns/app/sa/sleep-sa", "spiffe://cluster.local/ns/other/sa/backend-sa"} {
			for _, method := range []string{"GET", "POST"} {
				for _, path := range []string{"/", "/admin", "/healthz"} {
					r := rbactest.Request{ID: id, Src: "10.0.0.9", Remote: "10.0.0.9", Dst: "10.0.0.5", Port: 8080,
						Method: method, Path: path, Host: "echo.app"}
					if tok != nil {
						r.Metadata = map[string]map[string]any{reqauthn.FilterName: {"payload": tok}}
					}
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// TestRequestAuthenticationMatchesIstio compares, for every case, the
// plaintext HTTP chain of port 8080 that Istio's generator and ours give
// echo's sidecar: the order of jwt_authn and the RBAC filters, the
// jwt_authn configuration exactly, and what the RBAC filters decide for a
// matrix of requests with and without verified tokens. Key sets come from
// a loopback issuer, fetched by Istio's resolver and by keyfetch.
func TestRequestAuthenticationMatchesIstio(t *testing.T) {
	quietIstioLogs(t)
	w := newMeshObjects(t)
	pod := w.pod(t, "app/echo-1")
	inline, served := testKeySets(t)
	iss := httptest.NewUnstartedServer(nil)
	iss.Config.Handler = issuerHandler(iss, served)
	iss.Start()
	t.Cleanup(iss.Close)
	names := make([]string, 0, len(reqAuthnCases))
	for name := range reqAuthnCases {
		names = append(names, name)
	}
	sort.Strings(names)
	requests := reqAuthnRequests()
	for _, name := range names {
		c := reqAuthnCases[name]
		t.Run(name, func(t *testing.T) {
			yaml := strings.ReplaceAll(strings.ReplaceAll(c.istio, "ISSUER", iss.URL), "INLINE", inline)
			s := istioServer(t, sidecarScenario{istio: yaml})
			istioChain := httpChain(t, s.Listeners(istioProxy(s, pod)))
			ours := ourReqAuthnChain(t, w, yaml, pod.Labels, pod.Status.PodIP)

			in, on := filterOrder(istioChain), filterOrder(ours)
			if !slices.Equal(in, on) {
				t.Errorf("filter order: istio %v, bulwark %v", in, on)
			}
			ij, oj := jwtConfig(t, istioChain), jwtConfig(t, ours)
			if (ij == nil) != c.noJWT || (oj == nil) != c.noJWT {
				t.Fatalf("jwt_authn on the chain: istio %t, bulwark %t; want %t", ij != nil, oj != nil, !c.noJWT)
			}
			if ij != nil {
				if c.fetchFails {
					substituted := 0
					for _, p := range ij.GetProviders() {
						if p.GetLocalJwks().GetInlineString() == istiomodel.PublicOnlyJwks {
							p.GetLocalJwks().Specifier = oj.GetProviders()["origins-0"].GetLocalJwks().GetSpecifier()
							substituted++
						}
					}
					if substituted == 0 {
						t.Error("stale difference: Istio did not inline its PublicOnlyJwks")
					}
					if got := oj.GetProviders()["origins-0"].GetLocalJwks().GetInlineString(); got != keyfetch.RejectAllJWKS {
						t.Errorf("bulwark inlined %q for a key set it could not fetch", got)
					}
				}
				if diff := cmp.Diff(ij, oj, protocmp.Transform()); diff != "" {
					t.Errorf("jwt_authn differs (-istio +bulwark):\n%s", diff)
				}
			}
			ir, or := rbacConfigs(t, istioChain), rbacConfigs(t, ours)
			ie, oe := rbactest.Envoy(t, false), rbactest.Envoy(t, false)
			requests := requests
			if c.noJWT {
				// Without jwt_authn no request carries a verified payload.
				requests = slices.DeleteFunc(slices.Clone(requests), func(r rbactest.Request) bool { return r.Metadata != nil })
			}
			allowed, reported := 0, 0
			for _, r := range requests {
				a, b := ie.Allowed(ir, r), oe.Allowed(or, r)
				if a {
					allowed++
				}
				if a != b {
					if reported++; reported <= 5 {
						t.Errorf("istio allowed=%t, bulwark allowed=%t: %v", a, b, r)
					}
				}
			}
			if reported > 0 {
				t.Logf("%d requests decided differently; istio %v; bulwark %v", reported, ir, or)
			}
			if uniform := allowed == 0 || allowed == len(requests); uniform != c.uniform {
				t.Errorf("Istio allows %d of %d requests; uniform decisions expected: %t", allowed, len(requests), c.uniform)
			}
		})
	}
}

// testKeySets returns an inline key set (the documented form) and the key
// set the loopback issuer serves, each of one fresh P-256 key, written as
// keyfetch passes fetched key sets on, so that the configurations can be
// compared byte for byte.
func testKeySets(t *testing.T) (inline, served string) {
	t.Helper()
	set := func(kid string) string {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return set("inline"), set("served")
}

// issuerHandler serves the key set at /keys and a discovery document
// naming it; anything else is 404.
func issuerHandler(srv *httptest.Server, keys string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"` + srv.URL + `","jwks_uri":"` + srv.URL + `/keys"}`))
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(keys))
	})
	return mux
}

// ourReqAuthnChain is the plaintext HTTP chain of port 8080 envoygen
// gives the pod, its key sets fetched by keyfetch from what the model's
// RequestAuthentications name. The issuer is on loopback over plain
// http, which istiod fetches from only where its operator allows it
// (--allow-loopback-http-jwks), as here.
func ourReqAuthnChain(t *testing.T, w *meshObjects, yaml string, labels map[string]string, ip string) *hcmv3.HttpConnectionManager {
	t.Helper()
	snap := ourSnapshot(t, w.objects, yaml)
	rule := keyfetch.URLRule{LoopbackHTTP: true}
	cache := keyfetch.New(keyfetch.Config{}).JWKSCache(rule)
	cache.Want(reqauthn.Sources(snap.Resources().RequestAuthentications, rule))
	cache.RefreshDue(context.Background())
	g := &envoygen.Generator{
		TrustDomain: spiffeid.RequireTrustDomainFromString(trustDomain), Keys: cache.Current(),
		Mesh: envoygen.Mesh{AllowLoopbackHTTPJWKS: rule.LoopbackHTTP},
	}
	var listeners []*listenerv3.Listener
	for _, r := range g.Generate(snap, &envoygen.Proxy{Namespace: "app", Labels: labels, IPs: []string{ip}}, resource.ListenerType, []string{"virtualInbound"}, false) {
		m, err := r.Message(resource.ListenerType)
		if err != nil {
			t.Fatal(err)
		}
		l := m.(*listenerv3.Listener)
		if err := l.ValidateAll(); err != nil {
			t.Fatalf("envoygen's virtualInbound: %v", err)
		}
		listeners = append(listeners, l)
	}
	return httpChain(t, listeners)
}

// httpChain returns the connection manager of virtualInbound's plaintext
// chain for port 8080.
func httpChain(t *testing.T, listeners []*listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	for _, l := range listeners {
		if l.GetName() != "virtualInbound" {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			m := fc.GetFilterChainMatch()
			if m.GetDestinationPort().GetValue() != 8080 || m.GetTransportProtocol() != "raw_buffer" {
				continue
			}
			for _, f := range fc.GetFilters() {
				if f.GetName() != "envoy.filters.network.http_connection_manager" {
					continue
				}
				h := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
					t.Fatal(err)
				}
				return h
			}
		}
	}
	t.Fatal("no plaintext HTTP chain for port 8080 in virtualInbound")
	return nil
}

// filterOrder is the chain's jwt_authn, RBAC and router filters in order;
// the telemetry and other filters only Istio generates are left out.
func filterOrder(h *hcmv3.HttpConnectionManager) []string {
	var out []string
	for _, f := range h.GetHttpFilters() {
		switch f.GetName() {
		case reqauthn.FilterName, "envoy.filters.http.router":
			out = append(out, f.GetName())
		case "envoy.filters.http.rbac":
			r := &rbachttp.RBAC{}
			if f.GetTypedConfig().UnmarshalTo(r) == nil && r.GetRules() != nil {
				out = append(out, f.GetName()+"/"+r.GetRules().GetAction().String())
			}
		}
	}
	return out
}

func jwtConfig(t *testing.T, h *hcmv3.HttpConnectionManager) *jwtauthn.JwtAuthentication {
	t.Helper()
	for _, f := range h.GetHttpFilters() {
		if f.GetName() == reqauthn.FilterName {
			c := &jwtauthn.JwtAuthentication{}
			if err := f.GetTypedConfig().UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	return nil
}

func rbacConfigs(t *testing.T, h *hcmv3.HttpConnectionManager) []*rbacpb.RBAC {
	t.Helper()
	var out []*rbacpb.RBAC
	for _, f := range h.GetHttpFilters() {
		if f.GetName() != "envoy.filters.http.rbac" {
			continue
		}
		r := &rbachttp.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		if r.GetRules() != nil {
			out = append(out, proto.Clone(r.GetRules()).(*rbacpb.RBAC))
		}
	}
	return out
}
