package interop

import (
	"fmt"
	"sort"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbactcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	meshconfig "istio.io/api/mesh/v1alpha1"
	securityv1api "istio.io/api/security/v1"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/security/authz/builder"
	"istio.io/istio/pilot/pkg/security/trustdomain"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/config/validation"
	"istio.io/istio/pkg/util/protomarshal"

	bmodel "github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz/rbactest"
)

// authzCase is a set of AuthorizationPolicies, in namespace "app", that
// select one workload; specs are the YAML of each policy's spec.
type authzCase struct {
	specs []string
	// istioRefuses is whether Istio's admission validation refuses one of
	// the policies; the builders still see it, as if it got through.
	istioRefuses bool
	// uniform is whether Istio decides every HTTP request alike; for
	// every other case the request matrix must hold both decisions.
	uniform bool
	// aliases are the mesh config's trustDomainAliases.
	aliases []string
}

// authzCases are Istio's documented examples and the forms of past
// authorization bypasses (path and host normalization, not-lists, peers
// without identity, HTTP-only fields on TCP).
var authzCases = map[string]authzCase{
	"allow-nothing denies every request": {uniform: true, specs: []string{`{}`}},
	"deny-all with an empty rule denies every request": {uniform: true, specs: []string{`
action: DENY
rules: [{}]`}},
	"allow-all with an empty rule allows every request": {uniform: true, specs: []string{`
rules: [{}]`}},
	"an ALLOW on one principal admits only that identity": {specs: []string{`
rules:
- from: [{source: {principals: [cluster.local/ns/app/sa/a]}}]`}},
	"an ALLOW on a namespace admits every identity of it": {specs: []string{`
rules:
- from: [{source: {namespaces: [other]}}]`}},
	"an ALLOW on a principal prefix admits the namespace's identities": {specs: []string{`
rules:
- from: [{source: {principals: [cluster.local/ns/app/*]}}]`}},
	"an ALLOW on a foreign trust domain matches only that domain": {specs: []string{`
rules:
- from: [{source: {principals: [other.td/ns/app/sa/a]}}]`}},
	"with an alias, a DENY on the alias's principal denies the identity under the mesh's trust domain": {aliases: []string{"old.td"}, specs: []string{`
action: DENY
rules:
- from: [{source: {principals: [old.td/ns/app/sa/a]}}]`}},
	"with an alias, an ALLOW on a cluster.local principal admits the alias's identity": {aliases: []string{"old.td"}, specs: []string{`
rules:
- from: [{source: {principals: [cluster.local/ns/app/sa/a]}}]`}},
	"with an alias, a DENY on notPrincipals spares the identity under every domain": {aliases: []string{"old.td"}, specs: []string{`
action: DENY
rules:
- from: [{source: {notPrincipals: [old.td/ns/app/*]}}]`}},
	"with an alias, a principal of another trust domain matches only that domain": {aliases: []string{"old.td"}, specs: []string{`
rules:
- from: [{source: {principals: [other.td/ns/app/sa/a]}}]`}},
	"with an alias, a *suffix principal that matches the alias names the mesh's trust domain too": {aliases: []string{"old.td"}, specs: []string{`
rules:
- from: [{source: {principals: ["*.td/ns/other/sa/a"]}}]`}},
	"the documented methods and paths example": {specs: []string{`
rules:
- from: [{source: {principals: [cluster.local/ns/app/sa/a]}}]
  to: [{operation: {methods: [GET], paths: ["/api/*", "/"]}}]
- from: [{source: {namespaces: [other]}}]
  to: [{operation: {methods: [POST], paths: [/index.php]}}]`}},
	"an ALLOW on a host ignores the host's case": {specs: []string{`
rules:
- to: [{operation: {hosts: [example.com]}}]`}},
	"an ALLOW on a host with a port": {specs: []string{`
rules:
- to: [{operation: {hosts: ["example.com:8080"]}}]`}},
	"a DENY on a host is not bypassed by case or a port": {specs: []string{`
action: DENY
rules:
- to: [{operation: {hosts: [Example.COM]}}]`}},
	"a DENY on a host suffix wildcard": {specs: []string{`
action: DENY
rules:
- to: [{operation: {hosts: ["*.COM"]}}]`}},
	"a DENY on notHosts denies other hosts": {specs: []string{`
action: DENY
rules:
- to: [{operation: {notHosts: [echo.app]}}]`}},
	"an ALLOW on ports and notMethods": {specs: []string{`
rules:
- to: [{operation: {ports: ["8080"], notMethods: [POST]}}]`}},
	"a DENY on notPorts": {specs: []string{`
action: DENY
rules:
- to: [{operation: {notPorts: ["8080"]}}]`}},
	"an ALLOW on ipBlocks": {specs: []string{`
rules:
- from: [{source: {ipBlocks: [10.0.0.0/8]}}]`}},
	"a DENY on remoteIpBlocks and notIpBlocks": {specs: []string{`
action: DENY
rules:
- from: [{source: {remoteIpBlocks: [1.2.3.0/24]}}]
- from: [{source: {notIpBlocks: [10.0.0.0/8, "192.168.1.1"]}}]`}},
	"an ALLOW when a request header matches exactly or by prefix": {specs: []string{`
rules:
- when: [{key: "request.headers[x-user]", values: [alice, "ad*"]}]`}},
	"a DENY when a request header is not an allowed value": {specs: []string{`
action: DENY
rules:
- when: [{key: "request.headers[x-user]", notValues: [alice]}]`}},
	"an ALLOW when source.ip and destination.port match": {specs: []string{`
rules:
- when:
  - {key: source.ip, values: [10.0.0.0/8]}
  - {key: destination.port, values: ["8080"]}`}},
	"an ALLOW when connection.sni matches": {specs: []string{`
rules:
- when: [{key: connection.sni, values: ["*.app"]}]`}},
	"a DENY when connection.sni is not the expected name": {specs: []string{`
action: DENY
rules:
- when: [{key: connection.sni, notValues: [echo.app]}]`}},
	"an ALLOW when source.namespace matches and a DENY on notNamespaces": {specs: []string{`
rules:
- when: [{key: source.namespace, values: [app]}]`, `
action: DENY
rules:
- from: [{source: {notNamespaces: [app, other]}}]`}},
	"a DENY on a path prefix covers the prefix but not another case": {specs: []string{`
action: DENY
rules:
- to: [{operation: {paths: ["/admin*"]}}]`}},
	"a DENY on an exact path": {specs: []string{`
action: DENY
rules:
- to: [{operation: {paths: [/admin]}}]`}},
	"a DENY on a path suffix": {specs: []string{`
action: DENY
rules:
- to: [{operation: {paths: ["*.php"]}}]`}},
	"a DENY on a path does not cover its doubled-slash form": {specs: []string{`
action: DENY
rules:
- to: [{operation: {paths: [/a/b]}}]`}},
	"a DENY on a path does not cover its encoded-slash form": {specs: []string{`
action: DENY
rules:
- to: [{operation: {paths: [/admin/x]}}]`}},
	"a DENY on a path template": {specs: []string{`
action: DENY
rules:
- to: [{operation: {paths: ["/api/{*}/items/{**}"]}}]`}},
	"an ALLOW on notPaths": {specs: []string{`
rules:
- to: [{operation: {notPaths: ["/admin*", "*.php"]}}]`}},
	"a DENY on notPrincipals with a wildcard denies plaintext peers": {specs: []string{`
action: DENY
rules:
- from: [{source: {notPrincipals: ["*"]}}]`}},
	"a DENY on notPrincipals with an empty value denies everyone": {istioRefuses: true, uniform: true, specs: []string{`
action: DENY
rules:
- from: [{source: {notPrincipals: [""]}}]`}},
	"an ALLOW on notNamespaces with a wildcard admits only plaintext peers": {specs: []string{`
rules:
- from: [{source: {notNamespaces: ["*"]}}]`}},
	"a DENY on notNamespaces with an empty value denies everyone": {istioRefuses: true, uniform: true, specs: []string{`
action: DENY
rules:
- from: [{source: {notNamespaces: [""]}}]`}},
	"a DENY on a principal also denies plaintext peers": {specs: []string{`
action: DENY
rules:
- from: [{source: {principals: [cluster.local/ns/other/sa/a]}}]`}},
	"a DENY on a namespace also denies plaintext peers": {specs: []string{`
action: DENY
rules:
- from: [{source: {namespaces: [other]}}]
  to: [{operation: {paths: ["/admin*"]}}]`}},
	"a DENY when source.principal matches also denies plaintext peers": {specs: []string{`
action: DENY
rules:
- when: [{key: source.principal, values: ["*/sa/b"]}]`}},
	"an ALLOW on serviceAccounts and trustDomains": {specs: []string{`
rules:
- from: [{source: {serviceAccounts: [app/a, other/a]}}]
- from: [{source: {trustDomains: [other.td]}}]`}},
	"an ALLOW with only HTTP fields is dropped on TCP": {specs: []string{`
rules:
- to: [{operation: {methods: [GET]}}]
- from: [{source: {ipBlocks: [192.168.1.1]}}]`}},
	"a DENY keeps its TCP fields and ignores its HTTP fields on TCP": {specs: []string{`
action: DENY
rules:
- from: [{source: {ipBlocks: [192.168.1.1]}}]
  to: [{operation: {methods: [POST], ports: ["8080"]}}]
  when: [{key: "request.headers[x-user]", values: [admin]}]`}},
	"ALLOW and DENY policies together": {specs: []string{`
rules:
- from: [{source: {namespaces: [app]}}]
- from: [{source: {ipBlocks: [10.0.0.0/8]}}]
  to: [{operation: {methods: [GET]}}]`, `
action: DENY
rules:
- to: [{operation: {paths: ["/admin*"], ports: ["8080"]}}]`}},
	"an AUDIT policy never decides": {specs: []string{`
action: AUDIT
rules:
- to: [{operation: {paths: ["/admin*"]}}]`, `
rules:
- to: [{operation: {notPaths: [/index.php]}}]`}},
	"a CUSTOM policy denies everything in Bulwark": {specs: []string{`
action: CUSTOM
provider: {name: ext-authz}
rules:
- to: [{operation: {paths: ["/admin*"]}}]`}},
}

// authzDifference is a documented difference (pkg/xds/authz/doc.go) in
// one case: Istio allows the requests it covers and Bulwark denies them.
// The reverse, Bulwark allowing what Istio denies, is never allowed.
type authzDifference struct {
	reason string
	covers func(tcp bool, r rbactest.Request) bool
}

func plaintext(_ bool, r rbactest.Request) bool { return r.ID == "" }

const identityDenyReason = "doc.go difference 1: a DENY on the peer's identity also denies a peer without one, which in Istio passes it"

var authzDifferences = map[string]authzDifference{
	"a DENY on a principal also denies plaintext peers":                                                {reason: identityDenyReason, covers: plaintext},
	"a DENY on a namespace also denies plaintext peers":                                                {reason: identityDenyReason, covers: plaintext},
	"a DENY when source.principal matches also denies plaintext peers":                                 {reason: identityDenyReason, covers: plaintext},
	"with an alias, a DENY on the alias's principal denies the identity under the mesh's trust domain": {reason: identityDenyReason, covers: plaintext},
	"a CUSTOM policy denies everything in Bulwark": {
		reason: "doc.go difference 4: CUSTOM denies everything; Istio, without the provider, denies what the CUSTOM rules match",
		covers: func(bool, rbactest.Request) bool { return true },
	},
}

func TestAuthorizationPolicyMatchesIstio(t *testing.T) {
	const td = "cluster.local"
	chains := []struct {
		name     string
		tcp      bool
		requests []rbactest.Request
	}{
		{"http", false, authzHTTPRequests()},
		{"tcp", true, authzTCPRequests()},
	}
	names := make([]string, 0, len(authzCases))
	for name := range authzCases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := authzCases[name]
		t.Run(name, func(t *testing.T) {
			policies := parseAuthzCase(t, c)
			diff, hasDiff := authzDifferences[name]
			differed := 0
			for _, ch := range chains {
				istio := istioRBAC(t, policies, ch.tcp, td, c.aliases)
				ours := bulwarkRBAC(t, policies, ch.tcp, td, c.aliases)
				ie, oe := rbactest.Envoy(t, ch.tcp), rbactest.Envoy(t, ch.tcp)
				reported, istioAllowed := 0, 0
				for _, r := range ch.requests {
					a, b := ie.Allowed(istio, r), oe.Allowed(ours, r)
					if a {
						istioAllowed++
					}
					if a == b {
						continue
					}
					if a && !b && hasDiff && diff.covers(ch.tcp, r) {
						differed++
						continue
					}
					if reported++; reported <= 5 {
						t.Errorf("%s: istio allowed=%t, bulwark allowed=%t: %v", ch.name, a, b, r)
					}
				}
				if reported > 5 {
					t.Errorf("%s: %d more differences", ch.name, reported-5)
				}
				// The matrix must tell allowed requests from denied ones, or
				// the case tests nothing.
				if uniform := istioAllowed == 0 || istioAllowed == len(ch.requests); !ch.tcp && uniform != c.uniform {
					t.Errorf("%s: Istio allows %d of %d requests; uniform decisions expected: %t",
						ch.name, istioAllowed, len(ch.requests), c.uniform)
				}
				if reported > 0 {
					t.Logf("%s istio:   %v", ch.name, istio)
					t.Logf("%s bulwark: %v", ch.name, ours)
				}
			}
			if hasDiff && differed == 0 {
				t.Errorf("stale allowed difference (%s): no request is decided differently", diff.reason)
			}
		})
	}
	for name := range authzDifferences {
		if _, ok := authzCases[name]; !ok {
			t.Errorf("allowed difference for a case that does not exist: %q", name)
		}
	}
}

// authzHTTPRequests is every combination of the attributes the cases test.
func authzHTTPRequests() []rbactest.Request {
	type peer struct{ src, remote string }
	type extra struct {
		headers map[string]string
		sni     string
	}
	var out []rbactest.Request
	for _, id := range authzIdentities {
		for _, method := range []string{"GET", "POST"} {
			for _, path := range []string{"/", "/admin", "/admin/x", "/ADMIN", "/a/b", "/a//b", "/admin%2Fx",
				"/index.php", "/api/v1/items/q", "/info?q=/admin"} {
				for _, host := range []string{"example.com", "Example.COM", "example.com:8080", "EXAMPLE.COM:80", "echo.app"} {
					for _, port := range []uint32{8080, 9000} {
						for _, p := range []peer{{"10.0.0.9", "10.0.0.9"}, {"192.168.1.1", "1.2.3.4"}} {
							for _, x := range []extra{{nil, ""}, {map[string]string{"x-user": "alice"}, "echo.app"},
								{map[string]string{"X-User": "admin"}, "other.example.com"}} {
								out = append(out, rbactest.Request{ID: id, Src: p.src, Remote: p.remote, Dst: "10.0.0.2",
									Port: port, SNI: x.sni, Method: method, Path: path, Host: host, Headers: x.headers})
							}
						}
					}
				}
			}
		}
	}
	return out
}

// authzTCPRequests is every combination of what a TCP chain sees.
func authzTCPRequests() []rbactest.Request {
	var out []rbactest.Request
	for _, id := range authzIdentities {
		for _, port := range []uint32{8080, 9000} {
			for _, src := range []string{"10.0.0.9", "192.168.1.1", "2001:db8::1"} {
				for _, sni := range []string{"", "echo.app", "other.example.com"} {
					out = append(out, rbactest.Request{ID: id, Src: src, Remote: src, Dst: "10.0.0.2", Port: port, SNI: sni})
				}
			}
		}
	}
	return out
}

var authzIdentities = []string{
	"", // plaintext
	"spiffe://cluster.local/ns/app/sa/a",
	"spiffe://cluster.local/ns/app/sa/b",
	"spiffe://cluster.local/ns/other/sa/a",
	"spiffe://cluster.local/ns/another/sa/b",
	"spiffe://other.td/ns/app/sa/a",
	"spiffe://old.td/ns/app/sa/a",
	"spiffe://old.td/ns/other/sa/a",
}

func parseAuthzCase(t *testing.T, c authzCase) []*bmodel.AuthorizationPolicy {
	t.Helper()
	var out []*bmodel.AuthorizationPolicy
	refused := false
	for i, y := range c.specs {
		spec := &securityv1api.AuthorizationPolicy{}
		if err := protomarshal.ApplyYAMLStrict(y, spec); err != nil {
			t.Fatalf("policy %d: %v", i, err)
		}
		name := fmt.Sprintf("p%d", i)
		if _, err := validation.ValidateAuthorizationPolicy(config.Config{
			Meta: config.Meta{GroupVersionKind: gvk.AuthorizationPolicy, Name: name, Namespace: "app"},
			Spec: spec,
		}); err != nil {
			refused = true
			t.Logf("Istio's validation refuses %s: %v", name, err)
		}
		out = append(out, &bmodel.AuthorizationPolicy{Meta: bmodel.Meta{Namespace: "app", Name: name}, Spec: spec})
	}
	if refused != c.istioRefuses {
		t.Fatalf("Istio's validation refuses the case: %t, want %t", refused, c.istioRefuses)
	}
	return out
}

// istioRBAC is Istio's Envoy output for the policies, CUSTOM first as in
// Istio's listeners, with a mesh config that has no extension provider.
func istioRBAC(t *testing.T, policies []*bmodel.AuthorizationPolicy, tcp bool, td string, aliases []string) []*rbacpb.RBAC {
	t.Helper()
	res := model.AuthorizationPoliciesResult{}
	for _, p := range policies {
		ap := model.AuthorizationPolicy{Name: p.Name, Namespace: p.Namespace, Spec: p.Spec}
		switch p.Spec.GetAction() {
		case securityv1api.AuthorizationPolicy_ALLOW:
			res.Allow = append(res.Allow, ap)
		case securityv1api.AuthorizationPolicy_DENY:
			res.Deny = append(res.Deny, ap)
		case securityv1api.AuthorizationPolicy_AUDIT:
			res.Audit = append(res.Audit, ap)
		case securityv1api.AuthorizationPolicy_CUSTOM:
			res.Custom = append(res.Custom, ap)
		}
	}
	push := model.NewPushContext()
	push.Mesh = &meshconfig.MeshConfig{}
	bundle := trustdomain.NewBundle(td, aliases)
	var out []*rbacpb.RBAC
	for _, custom := range []bool{true, false} {
		b := builder.New(bundle, push, res, builder.Option{IsCustomBuilder: custom})
		if b == nil {
			continue
		}
		if tcp {
			for _, f := range b.BuildTCP() {
				var r rbactcp.RBAC
				if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
					t.Fatalf("istio network rbac: %v", err)
				}
				out = append(out, r.GetRules())
			}
			continue
		}
		for _, f := range b.BuildHTTP() {
			var r rbachttp.RBAC
			if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
				t.Fatalf("istio http rbac: %v", err)
			}
			out = append(out, r.GetRules())
		}
	}
	return out
}

// bulwarkRBAC is our Envoy output for the policies, each filter validated.
func bulwarkRBAC(t *testing.T, policies []*bmodel.AuthorizationPolicy, tcp bool, td string, aliases []string) []*rbacpb.RBAC {
	t.Helper()
	opts := authz.Options{TrustDomain: spiffeid.RequireTrustDomainFromString(td), TrustDomainAliases: aliases, Flavor: authz.Envoy}
	var out []*rbacpb.RBAC
	if tcp {
		fs, err := authz.NetworkFilters(policies, opts)
		if err != nil {
			t.Fatalf("NetworkFilters: %v", err)
		}
		for _, f := range fs {
			var r rbactcp.RBAC
			if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
				t.Fatalf("network rbac: %v", err)
			}
			if err := f.ValidateAll(); err != nil {
				t.Errorf("network filter: %v", err)
			}
			if err := r.ValidateAll(); err != nil {
				t.Errorf("network rbac: %v", err)
			}
			out = append(out, r.GetRules())
		}
		return out
	}
	fs, err := authz.HTTPFilters(policies, opts)
	if err != nil {
		t.Fatalf("HTTPFilters: %v", err)
	}
	for _, f := range fs {
		var r rbachttp.RBAC
		if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
			t.Fatalf("http rbac: %v", err)
		}
		if err := f.ValidateAll(); err != nil {
			t.Errorf("http filter: %v", err)
		}
		if err := r.ValidateAll(); err != nil {
			t.Errorf("http rbac: %v", err)
		}
		out = append(out, r.GetRules())
	}
	return out
}
