package authz

import (
	"errors"
	"slices"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func TestActions(t *testing.T) {
	all := &check{deny: []req{{}, {ID: sp("app", "a")}, {Path: "/x", Port: 9000}}}
	none := &check{allow: []req{{}, {ID: sp("app", "a")}, {Path: "/x", Port: 9000}}}
	run(t, map[string]testCase{
		"no policy allows everything": testCase{}.both(none),
		"an ALLOW policy without rules denies everything": {
			specs: []string{`{}`}, envoy: all, tcp: all, grpc: all,
		},
		"an ALLOW policy whose rules all drop denies everything": {
			specs: []string{`{rules: [{to: [{operation: {paths: [/a]}}]}, {to: [{operation: {methods: [GET]}}]}]}`},
			tcp:   all,
		},
		"a DENY policy without rules denies nothing and is reported": {
			specs: []string{`{action: DENY}`}, envoy: none, tcp: none, grpc: none,
			problems:     []string{"app/p: DENY without rules never matches"},
			grpcProblems: []string{"app/p: DENY without rules never matches"},
		},
		"a DENY policy with an empty rule denies everything": {
			specs: []string{`{action: DENY, rules: [{}]}`}, envoy: all, tcp: all, grpc: all,
		},
		"DENY wins over ALLOW": testCase{
			specs: []string{`{rules: [{}]}`, `{action: DENY, rules: [{to: [{operation: {paths: [/admin]}}]}]}`},
		}.both(&check{allow: []req{{Path: "/a"}}, deny: []req{{Path: "/admin"}}}),
		"any ALLOW policy may allow": testCase{
			specs: []string{`{rules: [{to: [{operation: {paths: [/a]}}]}]}`, `{rules: [{to: [{operation: {paths: [/b]}}]}]}`},
		}.both(&check{allow: []req{{Path: "/a"}, {Path: "/b"}}, deny: []req{{Path: "/c"}}}),
		"CUSTOM is not supported: it denies everything and is reported": {
			specs: []string{`{action: CUSTOM, provider: {name: ext}, rules: [{to: [{operation: {paths: [/x]}}]}]}`, `{rules: [{}]}`},
			envoy: all, tcp: all, grpc: all,
			problems:     []string{"app/p0: CUSTOM (external authorization) is not supported: every request is denied"},
			grpcProblems: []string{"app/p0: CUSTOM (external authorization) is not supported: every request is denied"},
		},
		"AUDIT never allows or denies; gRPC ignores it": {
			specs: []string{`{action: AUDIT, rules: [{}]}`}, envoy: none, tcp: none, grpc: none,
			grpcProblems: []string{"app/p: gRPC has no audit: policy has no effect"},
		},
		"an unknown action denies everything": {
			specs: []string{`{action: 7}`}, envoy: all, tcp: all, grpc: all,
			problems:     []string{"app/p: unknown action 7: every request is denied"},
			grpcProblems: []string{"app/p: unknown action 7"},
		},
	})
}

// TestFilters checks the filters' names, order and contents as Istio
// writes them.
func TestFilters(t *testing.T) {
	policies := parse(t,
		`{action: ALLOW, rules: [{to: [{operation: {paths: [/a]}}]}, {to: [{operation: {paths: [/b]}}]}]}`,
		`{action: DENY, rules: [{to: [{operation: {paths: [/admin]}}]}]}`,
		`{action: AUDIT, rules: [{}]}`,
		`{action: CUSTOM, provider: {name: ext}, rules: [{}]}`,
	)
	tests := map[string]struct {
		flavor  Flavor
		tcp     bool
		actions []rbacpb.RBAC_Action
		names   [][]string // policy names per filter
	}{
		"Envoy HTTP: CUSTOM refusal, AUDIT, DENY, ALLOW": {
			flavor:  Envoy,
			actions: []rbacpb.RBAC_Action{rbacpb.RBAC_DENY, rbacpb.RBAC_LOG, rbacpb.RBAC_DENY, rbacpb.RBAC_ALLOW},
			names: [][]string{
				{"istio-ext-authz-ns[app]-policy[p3]-deny-due-to-bad-CUSTOM-action"},
				{"ns[app]-policy[p2]-rule[0]"},
				{"ns[app]-policy[p1]-rule[0]"},
				{"ns[app]-policy[p0]-rule[0]", "ns[app]-policy[p0]-rule[1]"},
			},
		},
		"Envoy TCP: the same filters without the HTTP-only rules": {
			flavor:  Envoy,
			tcp:     true,
			actions: []rbacpb.RBAC_Action{rbacpb.RBAC_DENY, rbacpb.RBAC_LOG, rbacpb.RBAC_DENY, rbacpb.RBAC_ALLOW},
			names: [][]string{
				{"istio-ext-authz-ns[app]-policy[p3]-deny-due-to-bad-CUSTOM-action"},
				{"ns[app]-policy[p2]-rule[0]"},
				{"ns[app]-policy[p1]-rule[0]"},
				nil,
			},
		},
		"gRPC: the CUSTOM refusal in DENY, no AUDIT, then ALLOW": {
			flavor:  GRPC,
			actions: []rbacpb.RBAC_Action{rbacpb.RBAC_DENY, rbacpb.RBAC_ALLOW},
			names: [][]string{
				{"istio-ext-authz-ns[app]-policy[p3]-deny-due-to-bad-CUSTOM-action", "ns[app]-policy[p1]-rule[0]"},
				{"ns[app]-policy[p0]-rule[0]", "ns[app]-policy[p0]-rule[1]"},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rules := rbacOf(t, policies, Options{TrustDomain: td, Flavor: tc.flavor}, tc.tcp)
			if len(rules) != len(tc.actions) {
				t.Fatalf("%d filters, want %d: %v", len(rules), len(tc.actions), rules)
			}
			for i, r := range rules {
				var names []string
				for n := range r.GetPolicies() {
					names = append(names, n)
				}
				slices.Sort(names)
				if r.GetAction() != tc.actions[i] || !slices.Equal(names, tc.names[i]) {
					t.Errorf("filter %d: %s %q, want %s %q", i, r.GetAction(), names, tc.actions[i], tc.names[i])
				}
			}
		})
	}
}

func TestOptions(t *testing.T) {
	policies := parse(t, `{rules: [{}]}`)
	if _, err := HTTPFilters(policies, Options{Flavor: Envoy}); err == nil {
		t.Error("no error without a trust domain")
	}
	if _, err := HTTPFilters(policies, Options{TrustDomain: td, Flavor: 9}); err == nil {
		t.Error("no error for an unknown flavor")
	}
	if _, err := NetworkFilters(policies, Options{TrustDomain: td, Flavor: GRPC}); !errors.Is(err, ErrNoNetworkFilters) {
		t.Errorf("gRPC network filters: %v", err)
	}
	if fs, err := HTTPFilters(nil, Options{TrustDomain: td}); err != nil || len(fs) != 0 {
		t.Errorf("no policy: %v, %v", fs, err)
	}
}

// TestPolicyNamesDoNotCollide: names built from odd policy names that
// collide still keep every rule.
func TestPolicyNamesDoNotCollide(t *testing.T) {
	spec := parse(t, `{action: DENY, rules: [{to: [{operation: {paths: [/a]}}]}]}`)[0].Spec
	spec2 := parse(t, `{action: DENY, rules: [{to: [{operation: {paths: [/b]}}]}]}`)[0].Spec
	policies := []*model.AuthorizationPolicy{
		{Meta: model.Meta{Namespace: "a", Name: "b\xff"}, Spec: spec},
		{Meta: model.Meta{Namespace: "a", Name: "b\xfe"}, Spec: spec2},
	}
	rules := rbacOf(t, policies, Options{TrustDomain: spiffeid.RequireTrustDomainFromString("example.org")}, false)
	if len(rules) != 1 || len(rules[0].GetPolicies()) != 2 {
		t.Fatalf("rules %v", rules)
	}
	for _, path := range []string{"/a", "/b"} {
		if allowed(t, Envoy, false, rules, req{Path: path}) {
			t.Errorf("%s allowed", path)
		}
	}
}

// TestRegexQuotesPolicyText: regular-expression syntax in policy text
// matches itself only.
func TestRegexQuotesPolicyText(t *testing.T) {
	run(t, map[string]testCase{
		"in namespaces": testCase{
			specs: []string{`{rules: [{from: [{source: {namespaces: ["a.c*"]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("a.cx", "s")}}, deny: []req{{ID: sp("abcx", "s")}}}),
		"in service accounts": {
			specs: []string{`{action: DENY, rules: [{from: [{source: {serviceAccounts: ["n.s/s+a"]}}]}]}`},
			envoy: &check{allow: []req{{ID: sp("nxs", "ssa")}, {ID: sp("n.s", "sa")}}, deny: []req{{ID: sp("n.s", "s+a")}}},
			grpc:  &check{allow: []req{{ID: sp("nxs", "ssa")}}, deny: []req{{ID: sp("n.s", "s+a")}}},
		},
		"in principal suffixes": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: ["*/sa/(a|b)"]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("x", "(a|b)")}}, deny: []req{{ID: sp("x", "a")}}}),
		"in trust domains": {
			specs: []string{`{rules: [{from: [{source: {trustDomains: ["e.g*"]}}]}]}`},
			envoy: &check{allow: []req{{ID: "spiffe://e.gx/ns/a/sa/b"}}, deny: []req{{ID: "spiffe://exgx/ns/a/sa/b"}}},
		},
	})
}
