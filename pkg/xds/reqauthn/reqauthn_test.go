package reqauthn

import (
	"strings"
	"testing"

	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"google.golang.org/protobuf/encoding/protojson"
	securityv1 "istio.io/api/security/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// testJWKS is a valid key set of one P-256 key.
const testJWKS = `{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`

// fetched is Keys holding docs by jwks_uri (or issuer when discovered).
type fetched map[string]string

func (f fetched) JWKS(src keyfetch.JWKSSource) (string, bool) {
	k := src.JWKSURI
	if k == "" {
		k = src.Issuer
	}
	doc, ok := f[k]
	if !ok {
		return keyfetch.RejectAllJWKS, false
	}
	return doc, true
}

// parse reads RequestAuthentication specs in YAML, p0, p1, ... of
// namespace app.
func parse(t *testing.T, specs ...string) []*model.RequestAuthentication {
	t.Helper()
	var out []*model.RequestAuthentication
	for i, s := range specs {
		js, err := yaml.YAMLToJSON([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		spec := &securityv1.RequestAuthentication{}
		if err := protojson.Unmarshal(js, spec); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		out = append(out, &model.RequestAuthentication{Meta: model.Meta{Namespace: "app", Name: "p" + string(rune('0'+i))}, Spec: spec})
	}
	return out
}

// build returns the filter's configuration after checking it validates
// and marshals deterministically.
func build(t *testing.T, policies []*model.RequestAuthentication, keys Keys) (*jwtauthn.JwtAuthentication, []Problem) {
	t.Helper()
	f, problems, err := Filter(policies, keys, keyfetch.URLRule{})
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		return nil, problems
	}
	if f.GetName() != "envoy.filters.http.jwt_authn" {
		t.Errorf("filter named %q", f.GetName())
	}
	if err := f.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	cfg := &jwtauthn.JwtAuthentication{}
	if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateAll(); err != nil {
		t.Fatalf("Envoy refuses %v: %v", cfg, err)
	}
	again, _, _ := Filter(policies, keys, keyfetch.URLRule{})
	if string(again.GetTypedConfig().GetValue()) != string(f.GetTypedConfig().GetValue()) {
		t.Error("the same policies marshal to different bytes")
	}
	return cfg, problems
}

func TestNoRuleNoFilter(t *testing.T) {
	for _, specs := range [][]string{nil, {`{}`}, {`{selector: {matchLabels: {app: a}}}`}} {
		if cfg, _ := build(t, parse(t, specs...), fetched{}); cfg != nil {
			t.Errorf("%v: filter %v, want none", specs, cfg)
		}
	}
}

func TestOneRule(t *testing.T) {
	cfg, problems := build(t, parse(t, `
jwtRules:
- issuer: https://idp.example.com
  audiences: [web, api]
  jwks: '`+testJWKS+`'
  fromHeaders: [{name: x-jwt, prefix: "Bearer "}]
  fromParams: [token]
  fromCookies: [session]
  outputPayloadToHeader: x-jwt-payload
  outputClaimToHeaders: [{header: x-sub, claim: sub}]
  forwardOriginalToken: true
  spaceDelimitedClaims: [roles, scope]`), fetched{})
	if len(problems) != 0 {
		t.Errorf("problems %v", problems)
	}
	p := cfg.GetProviders()["origins-0"]
	switch {
	case len(cfg.GetProviders()) != 1 || p == nil:
		t.Fatalf("providers %v", cfg.GetProviders())
	case p.GetIssuer() != "https://idp.example.com" || strings.Join(p.GetAudiences(), ",") != "web,api":
		t.Errorf("issuer/audiences %v", p)
	case p.GetLocalJwks().GetInlineString() != testJWKS:
		t.Errorf("inline jwks %q, want the rule's own", p.GetLocalJwks().GetInlineString())
	case p.GetFromHeaders()[0].GetName() != "x-jwt" || p.GetFromHeaders()[0].GetValuePrefix() != "Bearer " ||
		p.GetFromParams()[0] != "token" || p.GetFromCookies()[0] != "session":
		t.Errorf("token locations %v", p)
	case p.GetForwardPayloadHeader() != "x-jwt-payload" || !p.GetForward() ||
		p.GetClaimToHeaders()[0].GetHeaderName() != "x-sub" || p.GetClaimToHeaders()[0].GetClaimName() != "sub":
		t.Errorf("outputs %v", p)
	case p.GetPayloadInMetadata() != "payload":
		t.Errorf("payload in metadata under %q", p.GetPayloadInMetadata())
	case strings.Join(p.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims(), ",") != "permission,roles,scope":
		t.Errorf("space-delimited claims %v", p.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims())
	case p.GetClearRouteCache():
		t.Error("a sidecar does not clear the route cache")
	case !cfg.GetBypassCorsPreflight():
		t.Error("CORS preflight is not bypassed")
	}
	// One provider: its token is valid, or there is none.
	req := cfg.GetRules()[0].GetRequires().GetRequiresAny().GetRequirements()
	if len(cfg.GetRules()) != 1 || cfg.GetRules()[0].GetMatch().GetPrefix() != "/" || len(req) != 2 ||
		req[0].GetProviderName() != "origins-0" || req[1].GetAllowMissing() == nil {
		t.Errorf("requirement %v", cfg.GetRules())
	}
}

func TestRulesSortedByIssuerAndEachValidOrMissing(t *testing.T) {
	policies := parse(t,
		`{jwtRules: [{issuer: "https://z.example", jwksUri: "https://z.example/keys"}]}`,
		`{jwtRules: [{issuer: "https://a.example"}, {issuer: "https://m.example", jwks: '`+testJWKS+`'}]}`)
	cfg, problems := build(t, policies, fetched{"https://z.example/keys": testJWKS, "https://a.example": testJWKS})
	if len(problems) != 0 {
		t.Errorf("problems %v", problems)
	}
	for i, iss := range []string{"https://a.example", "https://m.example", "https://z.example"} {
		if got := cfg.GetProviders()["origins-"+string(rune('0'+i))].GetIssuer(); got != iss {
			t.Errorf("origins-%d is %q, want %q", i, got, iss)
		}
	}
	anyOf := cfg.GetRules()[0].GetRequires().GetRequiresAny().GetRequirements()
	if len(anyOf) != 4 || anyOf[0].GetProviderName() != "origins-0" || anyOf[2].GetProviderName() != "origins-2" {
		t.Fatalf("requirement %v", anyOf)
	}
	all := anyOf[3].GetRequiresAll().GetRequirements()
	if len(all) != 3 {
		t.Fatalf("last requirement %v, want each provider valid or missing", anyOf[3])
	}
	for i, r := range all {
		or := r.GetRequiresAny().GetRequirements()
		if len(or) != 2 || or[0].GetProviderName() != "origins-"+string(rune('0'+i)) || or[1].GetAllowMissing() == nil {
			t.Errorf("requirement %d: %v", i, r)
		}
	}
	if got := Sources(policies, keyfetch.URLRule{}); len(got) != 2 || got[0] != (keyfetch.JWKSSource{Issuer: "https://a.example"}) ||
		got[1] != (keyfetch.JWKSSource{Issuer: "https://z.example", JWKSURI: "https://z.example/keys"}) {
		t.Errorf("sources %v", got)
	}
}

func TestKeySetsFailClosed(t *testing.T) {
	for name, tc := range map[string]struct {
		spec    string
		keys    Keys
		problem string
		fetch   bool // the rule's key set is one to fetch
	}{
		"a key set not fetched yet": {
			spec: `{jwtRules: [{issuer: "https://idp.example", jwksUri: "https://idp.example/keys"}]}`, keys: fetched{},
			problem: "has not been fetched", fetch: true,
		},
		"no key source at all": {
			spec: `{jwtRules: [{issuer: "https://idp.example"}]}`, keys: nil,
			problem: "has not been fetched", fetch: true,
		},
		"inline jwks without a usable key": {
			spec:    `{jwtRules: [{issuer: "https://idp.example", jwks: '{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}'}]}`,
			problem: "holds no usable public signing key",
		},
		"inline jwks that is not JSON": {
			spec:    `{jwtRules: [{issuer: "https://idp.example", jwks: "not json"}]}`,
			problem: "holds no usable public signing key",
		},
		"a jwksUri at the metadata address over http": {
			spec:    `{jwtRules: [{issuer: "https://idp.example", jwksUri: "http://169.254.169.254/latest/meta-data/"}]}`,
			keys:    fetched{"http://169.254.169.254/latest/meta-data/": testJWKS},
			problem: "its jwksUri is not fetched",
		},
		"a jwksUri over http to a loopback port": {
			spec:    `{jwtRules: [{issuer: "https://idp.example", jwksUri: "http://127.0.0.1:15014/debug/configz"}]}`,
			keys:    fetched{"http://127.0.0.1:15014/debug/configz": testJWKS},
			problem: "its jwksUri is not fetched: http to a loopback host is not allowed by this istiod (--allow-loopback-http-jwks)",
		},
		"an issuer over http on a loopback port, without jwksUri": {
			spec:    `{jwtRules: [{issuer: "http://localhost:15014"}]}`,
			keys:    fetched{"http://localhost:15014": testJWKS},
			problem: "its issuer's discovery document is not fetched: http to a loopback host is not allowed",
		},
		"an issuer that is not a URL, without jwks or jwksUri": {
			spec:    `{jwtRules: [{issuer: "testing@secure.istio.io"}]}`,
			keys:    fetched{"testing@secure.istio.io": testJWKS},
			problem: "its issuer's discovery document is not fetched",
		},
		"a bad header name Envoy would refuse": {
			spec:    `{jwtRules: [{issuer: "https://idp.example", jwks: '` + testJWKS + `', outputPayloadToHeader: "bad header\n"}]}`,
			problem: "Envoy would refuse the rule",
		},
	} {
		t.Run(name, func(t *testing.T) {
			policies := parse(t, tc.spec)
			cfg, problems := build(t, policies, tc.keys)
			if got := cfg.GetProviders()["origins-0"].GetLocalJwks().GetInlineString(); got != keyfetch.RejectAllJWKS {
				t.Errorf("key set %q, want RejectAllJWKS", got)
			}
			if len(problems) != 1 || !strings.Contains(problems[0].String(), tc.problem) ||
				!strings.Contains(problems[0].String(), "app/p0 jwtRules[0]") {
				t.Errorf("problems %v, want one saying %q", problems, tc.problem)
			}
			if got := len(Sources(policies, keyfetch.URLRule{})); (got == 1) != tc.fetch {
				t.Errorf("%d key sets to fetch, want fetched: %t", got, tc.fetch)
			}
		})
	}
}

// TestLoopbackHTTPIsTheOperatorsChoice: where istiod's operator allows
// plain http to loopback hosts, a rule naming one is fetched and its keys
// inlined like any other.
func TestLoopbackHTTPIsTheOperatorsChoice(t *testing.T) {
	allow := keyfetch.URLRule{LoopbackHTTP: true}
	for name, spec := range map[string]string{
		"by jwksUri":   `{jwtRules: [{issuer: "https://idp.example", jwksUri: "http://127.0.0.1:8080/keys"}]}`,
		"by discovery": `{jwtRules: [{issuer: "http://localhost:8080"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			policies := parse(t, spec)
			srcs := Sources(policies, allow)
			if len(srcs) != 1 {
				t.Fatalf("sources %v, want one", srcs)
			}
			if got := Sources(policies, keyfetch.URLRule{}); len(got) != 0 {
				t.Errorf("sources %v without the operator's choice, want none", got)
			}
			keys := fetched{srcs[0].JWKSURI: testJWKS}
			if srcs[0].JWKSURI == "" {
				keys = fetched{srcs[0].Issuer: testJWKS}
			}
			cfg, problems := Config(policies, keys, allow)
			if len(problems) != 0 {
				t.Errorf("problems %v", problems)
			}
			if got := cfg.GetProviders()["origins-0"].GetLocalJwks().GetInlineString(); got != testJWKS {
				t.Errorf("key set %q, want the fetched one", got)
			}
		})
	}
}
