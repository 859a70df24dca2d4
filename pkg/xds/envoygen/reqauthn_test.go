package envoygen

import (
	"slices"
	"strings"
	"testing"

	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

const jwtManifests = manifests + `---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  jwtRules: [{issuer: "https://idp.example", jwksUri: "https://idp.example/keys"}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  action: CUSTOM
  provider: {name: ext}
  rules: [{to: [{operation: {paths: [/ext]}}]}]
`

// keysOf is Keys holding doc for every key set.
type keysOf string

func (k keysOf) JWKS(keyfetch.JWKSSource) (string, bool) { return string(k), true }

const echoJWKS = `{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`

// httpFilterNames returns, per inbound HTTP chain, its HTTP filters' names
// and the jwt_authn configuration if any.
func httpFilterNames(t *testing.T, c config) (map[string][]string, []*jwtauthn.JwtAuthentication) {
	t.Helper()
	out := map[string][]string{}
	var jwts []*jwtauthn.JwtAuthentication
	for i, fc := range c.listeners["virtualInbound"].GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() != hcmFilterName {
				continue
			}
			m := &hcm.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, hf := range m.GetHttpFilters() {
				names = append(names, hf.GetName())
				if hf.GetName() == "envoy.filters.http.jwt_authn" {
					cfg := &jwtauthn.JwtAuthentication{}
					if err := hf.GetTypedConfig().UnmarshalTo(cfg); err != nil {
						t.Fatal(err)
					}
					jwts = append(jwts, cfg)
				}
			}
			out[fc.GetName()+"#"+string(rune('a'+i))] = names
		}
	}
	return out, jwts
}

func TestRequestAuthenticationOnInboundHTTPChains(t *testing.T) {
	snap := modeltest.Load(t, jwtManifests)
	echo := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo"}, IPs: []string{"10.0.0.5"}}
	c := generate(t, &Generator{TrustDomain: td, Keys: keysOf(echoJWKS)}, snap, echo)
	chains, jwts := httpFilterNames(t, c)
	if len(chains) == 0 {
		t.Fatal("no inbound HTTP chain")
	}
	// Istio's order: the CUSTOM refusal, jwt_authn, the other RBAC filters.
	want := []string{"envoy.filters.http.rbac", "envoy.filters.http.jwt_authn", "envoy.filters.http.rbac", "envoy.filters.http.router"}
	for name, got := range chains {
		if !slices.Equal(got, want) {
			t.Errorf("chain %s: filters %v, want %v", name, got, want)
		}
	}
	for _, j := range jwts {
		if got := j.GetProviders()["origins-0"].GetLocalJwks().GetInlineString(); got != echoJWKS {
			t.Errorf("inline key set %q, want the fetched one", got)
		}
	}
	// TCP chains get no jwt_authn: it is an HTTP filter.
	for _, fc := range c.listeners["virtualInbound"].GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() == "envoy.filters.http.jwt_authn" {
				t.Errorf("chain %s has jwt_authn as a network filter", fc.GetName())
			}
		}
	}

	t.Run("a key set not held rejects every token", func(t *testing.T) {
		_, jwts := httpFilterNames(t, generate(t, &Generator{TrustDomain: td}, snap, echo))
		if len(jwts) == 0 {
			t.Fatal("no jwt_authn without keys: tokens would pass unchecked")
		}
		for _, j := range jwts {
			if got := j.GetProviders()["origins-0"].GetLocalJwks().GetInlineString(); got != keyfetch.RejectAllJWKS {
				t.Errorf("inline key set %q, want RejectAllJWKS", got)
			}
		}
	})
	t.Run("a workload the policy does not select gets no jwt_authn", func(t *testing.T) {
		other := &Proxy{Namespace: "web", Labels: map[string]string{"app": "other"}, IPs: []string{"10.0.1.5"}}
		chains, jwts := httpFilterNames(t, generate(t, &Generator{TrustDomain: td, Keys: keysOf(echoJWKS)}, snap, other))
		if len(chains) == 0 || len(jwts) != 0 {
			t.Errorf("%d HTTP chains, %d with jwt_authn; want some, none", len(chains), len(jwts))
		}
	})
	t.Run("replicas told apart only by their RequestAuthentication do not share the listener", func(t *testing.T) {
		snap := modeltest.Load(t, strings.Replace(jwtManifests, "selector: {matchLabels: {app: echo}}\n  jwtRules", "selector: {matchLabels: {version: v1}}\n  jwtRules", 1))
		g := &Generator{TrustDomain: td, Keys: keysOf(echoJWKS)}
		key := func(version string) string {
			p := &Proxy{Namespace: "app", Labels: map[string]string{"app": "echo", "version": version}, IPs: []string{"10.0.0.5"}}
			for _, r := range g.Generate(snap, p, resource.ListenerType, []string{"virtualInbound"}, false) {
				return r.Key
			}
			return ""
		}
		if k1, k2 := key("v1"), key("v2"); k1 == "" || k1 == k2 {
			t.Errorf("listener keys %q and %q: v2 would get v1's jwt_authn", k1, k2)
		}
	})
}
