package grpcgen

import (
	"strings"
	"testing"

	rbacconfig "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The translation is package authz's and tested there; these tests pin
// what grpcgen's servers have always received.

// rbacOf generates the RBAC filters for the policy manifests.
func rbacOf(t *testing.T, policies string) []*rbacconfig.RBAC {
	t.Helper()
	snap := load(t, policies)
	g := &Generator{TrustDomain: td}
	filters, err := g.rbacFilters(snap.AuthorizationPolicies("app", map[string]string{"app": "echo"}))
	if err != nil {
		t.Fatal(err)
	}
	var out []*rbacconfig.RBAC
	names := map[string]bool{}
	for _, f := range filters {
		// gRPC refuses a listener whose HTTP filters share a name.
		if names[f.GetName()] {
			t.Fatalf("two RBAC filters named %s", f.GetName())
		}
		names[f.GetName()] = true
		var r rbacfilter.RBAC
		if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
			t.Fatal(err)
		}
		if err := r.ValidateAll(); err != nil {
			t.Fatal(err)
		}
		want := "envoy.filters.http.rbac"
		if r.GetRules().GetAction() == rbacconfig.RBAC_DENY {
			want = "envoy.filters.http.rbac.DENY"
		}
		if f.GetName() != want {
			t.Errorf("%s filter named %s, want %s", r.GetRules().GetAction(), f.GetName(), want)
		}
		out = append(out, r.GetRules())
	}
	return out
}

func policy(action, rules string) string {
	return "\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: app}\nspec: {action: " + action + ", rules: " + rules + "}"
}

// matchesNothing is whether p is Istio's policy that never matches.
func matchesNothing(p *rbacconfig.Policy) bool {
	return len(p.GetPermissions()) == 1 && p.GetPermissions()[0].GetNotRule().GetAny()
}

func TestRBACTranslation(t *testing.T) {
	tests := map[string]struct {
		policies string
		check    func(t *testing.T, rs []*rbacconfig.RBAC)
	}{
		"a DENY and an ALLOW policy give a DENY filter, then an ALLOW filter": {
			policies: policy("ALLOW", `[{from: [{source: {principals: ["cluster.local/ns/app/sa/client"]}}]}]`) +
				strings.Replace(policy("DENY", `[{from: [{source: {principals: ["cluster.local/ns/app/sa/bad"]}}]}]`), "name: p,", "name: q,", 1),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				if len(rs) != 2 || rs[0].GetAction() != rbacconfig.RBAC_DENY || rs[1].GetAction() != rbacconfig.RBAC_ALLOW {
					t.Errorf("filters: %v", rs)
				}
			},
		},
		"no policy means no filter": {
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				if len(rs) != 0 {
					t.Errorf("filters: %v", rs)
				}
			},
		},
		"an ALLOW policy without rules allows nothing": {
			policies: policy("ALLOW", "[]"),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				if len(rs) != 1 || rs[0].GetAction() != rbacconfig.RBAC_ALLOW {
					t.Fatalf("filters: %v", rs)
				}
				for _, p := range rs[0].GetPolicies() {
					if !matchesNothing(p) {
						t.Errorf("policy %v matches", p)
					}
				}
			},
		},
		"a DENY on principals also matches callers without an identity": {
			policies: policy("DENY", `[{from: [{source: {principals: ["cluster.local/ns/app/sa/bad"]}}]}]`),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				p := rs[0].GetPolicies()["ns[app]-policy[p]-rule[0]"].GetPrincipals()[0]
				ids := p.GetOrIds().GetIds()
				if len(ids) != 2 || ids[0].GetAuthenticated().GetPrincipalName().GetExact() != "spiffe://cluster.local/ns/app/sa/bad" ||
					ids[1].GetNotId().GetAuthenticated() == nil || ids[1].GetNotId().GetAuthenticated().GetPrincipalName() != nil {
					t.Errorf("principal: %v", p)
				}
			},
		},
		"an ALLOW on principals matches only that authenticated identity": {
			policies: policy("ALLOW", `[{from: [{source: {principals: ["cluster.local/ns/app/sa/good"]}}]}]`),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				p := rs[0].GetPolicies()["ns[app]-policy[p]-rule[0]"].GetPrincipals()[0]
				if p.GetAuthenticated().GetPrincipalName().GetExact() != "spiffe://cluster.local/ns/app/sa/good" {
					t.Errorf("principal: %v", p)
				}
			},
		},
		"an ALLOW on namespaces matches only our trust domain": {
			policies: policy("ALLOW", `[{from: [{source: {namespaces: ["app"]}}]}]`),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				p := rs[0].GetPolicies()["ns[app]-policy[p]-rule[0]"].GetPrincipals()[0]
				if p.GetAuthenticated().GetPrincipalName().GetPrefix() != "spiffe://cluster.local/ns/app/sa/" {
					t.Errorf("principal: %v", p)
				}
			},
		},
		"an ALLOW rule with a field gRPC cannot check is dropped": {
			policies: policy("ALLOW", `[{from: [{source: {ipBlocks: ["10.0.0.0/8"]}}]}]`),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				if len(rs[0].GetPolicies()) != 0 {
					t.Errorf("policies: %v", rs[0].GetPolicies())
				}
			},
		},
		"a DENY rule with a condition gRPC cannot check denies more": {
			policies: policy("DENY", `[{when: [{key: "request.headers[x]", values: ["y"]}]}]`),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				p := rs[0].GetPolicies()["ns[app]-policy[p]-rule[0]"]
				if !p.GetPrincipals()[0].GetAny() || !p.GetPermissions()[0].GetAny() {
					t.Errorf("policy: %v", p)
				}
			},
		},
		"a DENY rule with a bad port denies on every port": {
			policies: policy("DENY", `[{to: [{operation: {ports: ["grpc"]}}]}]`),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				p := rs[0].GetPolicies()["ns[app]-policy[p]-rule[0]"]
				if !p.GetPrincipals()[0].GetAny() || !p.GetPermissions()[0].GetAny() {
					t.Errorf("policy: %v", p)
				}
			},
		},
		"a CUSTOM policy denies everything": {
			policies: policy("CUSTOM", `[{}]`),
			check: func(t *testing.T, rs []*rbacconfig.RBAC) {
				if len(rs) != 1 || rs[0].GetAction() != rbacconfig.RBAC_DENY || len(rs[0].GetPolicies()) != 1 {
					t.Fatalf("filters: %v", rs)
				}
				for _, p := range rs[0].GetPolicies() {
					if !p.GetPrincipals()[0].GetAny() || !p.GetPermissions()[0].GetAny() {
						t.Errorf("policy: %v", p)
					}
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) { tc.check(t, rbacOf(t, tc.policies)) })
	}
}

// TestRBACQuotesRegexSyntax feeds regex syntax through every identity
// field: policy text reaches a regular expression only quoted.
func TestRBACQuotesRegexSyntax(t *testing.T) {
	rs := rbacOf(t, policy("DENY", `[{from: [{source: {principals: [".*"], notPrincipals: ["a|b"], namespaces: ["(x)*"]}}, {source: {serviceAccounts: ["app/.+"]}}], to: [{operation: {paths: ["/a.*b"], methods: ["P.ST"]}}]}]`)+
		"\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: q, namespace: app}\nspec: {rules: [{from: [{source: {principals: [\"*[a-z]+\"]}}]}]}")
	n := 0
	for _, r := range rs {
		for _, re := range regexes(r.ProtoReflect()) {
			n++
			if rest := unquoted(re); strings.ContainsAny(rest, `\.+*?()|[]{}^$`) {
				t.Errorf("regex %q has unquoted syntax %q", re, rest)
			}
		}
	}
	if n == 0 {
		t.Error("no regex to check")
	}
}

// regexes returns the regular expressions under m.
func regexes(m protoreflect.Message) []string {
	if re, ok := m.Interface().(*matcher.RegexMatcher); ok {
		return []string{re.GetRegex()}
	}
	var out []string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				out = append(out, regexes(mv.Message())...)
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				out = append(out, regexes(v.List().Get(i).Message())...)
			}
		case !fd.IsList() && fd.Message() != nil:
			out = append(out, regexes(v.Message())...)
		}
		return true
	})
	return out
}

// unquoted removes the quoted characters and the fragments package authz
// writes; what remains must be plain text.
func unquoted(re string) string {
	var b strings.Builder
	for i := 0; i < len(re); i++ {
		if re[i] == '\\' && i+1 < len(re) {
			i++
			b.WriteByte('x')
			continue
		}
		b.WriteByte(re[i])
	}
	return strings.NewReplacer("(.+/|)", "", "(/.+)?", "", "[^/]*", "", ".*", "", ".+", "").Replace(b.String())
}
