package authz

import (
	"fmt"
	"strings"
	"testing"
)

func TestFailClosed(t *testing.T) {
	denyAll := &check{deny: []req{{}, {ID: sp("app", "a")}}}
	run(t, map[string]testCase{
		"requestPrincipals drop an ALLOW rule on gRPC": {
			specs:        []string{`{rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]}`},
			grpc:         denyAll,
			grpcProblems: []string{"from[0].source.requestPrincipals: request authentication (JWT) is not supported on proxyless gRPC, which has no jwt_authn: rule dropped"},
		},
		"notRequestPrincipals drop an ALLOW rule on gRPC": {
			specs:        []string{`{rules: [{from: [{source: {notRequestPrincipals: ["x/y"]}}]}]}`},
			grpc:         denyAll,
			grpcProblems: []string{"notRequestPrincipals: request authentication (JWT) is not supported on proxyless gRPC"},
		},
		"requestPrincipals are left out of a DENY rule on gRPC, which denies more": {
			specs:        []string{`{action: DENY, rules: [{from: [{source: {requestPrincipals: [iss/sub]}}], to: [{operation: {paths: [/admin]}}]}]}`},
			grpc:         &check{allow: []req{{Path: "/a"}}, deny: []req{{Path: "/admin"}, {Path: "/admin", ID: sp("a", "b")}}},
			grpcProblems: []string{"requestPrincipals: request authentication (JWT) is not supported on proxyless gRPC, which has no jwt_authn: left out"},
		},
		"a bad claim key drops an ALLOW rule and is left out of a DENY rule": {
			specs: []string{
				`{rules: [{when: [{key: "request.auth.claims[]", values: [admin]}]}, {to: [{operation: {paths: [/public]}}]}]}`,
				`{action: DENY, rules: [{to: [{operation: {paths: ["/public/secret"]}}], when: [{key: "request.auth.claims[a[b]]", values: [x]}]}]}`,
			},
			envoy:    &check{allow: []req{{Path: "/public"}}, deny: []req{{Path: "/public/secret"}, {Path: "/x"}}},
			problems: []string{"app/p0 rules[0].when[0]: \"request.auth.claims[]\": a claim name is empty or holds a bracket: rule dropped", "app/p1 rules[0].when[0]: \"request.auth.claims[a[b]]\": a claim name is empty or holds a bracket: left out"},
		},
		"a bad port drops an ALLOW rule": testCase{
			specs:        []string{`{rules: [{to: [{operation: {ports: ["8080", http]}}]}, {to: [{operation: {paths: [/ok]}}]}]}`},
			problems:     []string{`rules[0].to[0].operation.ports[1]: port "http" is not a number in 0-65535: rule dropped`},
			grpcProblems: []string{`rules[0].to[0].operation.ports[1]: port "http" is not a number in 0-65535: rule dropped`},
		}.both(&check{allow: []req{{Path: "/ok"}}, deny: []req{{Port: 8080}}}),
		"a bad port leaves the ports out of a DENY rule": testCase{
			specs:        []string{`{action: DENY, rules: [{to: [{operation: {ports: ["8080", "70000"], paths: [/a]}}]}]}`},
			problems:     []string{`ports[1]: port "70000" is not a number in 0-65535: left out`},
			grpcProblems: []string{`ports[1]: port "70000" is not a number in 0-65535: left out`},
		}.both(&check{allow: []req{{Path: "/b"}}, deny: []req{{Path: "/a", Port: 9090}}}),
		"a bad not-port of a DENY rule is left out alone": testCase{
			specs:        []string{`{action: DENY, rules: [{to: [{operation: {notPorts: ["8080", "-1"]}}]}]}`},
			problems:     []string{`notPorts[1]: port "-1" is not a number in 0-65535: left out`},
			grpcProblems: []string{`notPorts[1]`},
		}.both(&check{allow: []req{{Port: 8080}}, deny: []req{{Port: 9090}}}),
		"a bad CIDR drops an ALLOW rule and leaves the field out of a DENY rule": {
			specs: []string{
				`{rules: [{from: [{source: {ipBlocks: [10.0.0.0/33]}}]}, {to: [{operation: {paths: [/ok, /deny]}}]}]}`,
				`{action: DENY, rules: [{from: [{source: {ipBlocks: ["fe80::1%eth0"]}}], to: [{operation: {paths: [/deny]}}]}]}`,
			},
			envoy:    &check{allow: []req{{Path: "/ok"}}, deny: []req{{Src: "10.0.0.1"}, {Path: "/deny", Src: "192.168.0.1"}}},
			problems: []string{`app/p0 rules[0].from[0].source.ipBlocks[0]: "10.0.0.0/33" is not a CIDR range: rule dropped`, `app/p1 rules[0].from[0].source.ipBlocks[0]: "fe80::1%eth0" is not an IP address: left out`},
		},
		"an unknown when key drops an ALLOW rule and is left out of a DENY rule (Istio skips that rule)": testCase{
			specs: []string{
				`{rules: [{when: [{key: sourc.ip, values: [10.0.0.1]}]}, {to: [{operation: {paths: [/ok, /deny]}}]}]}`,
				`{action: DENY, rules: [{to: [{operation: {paths: [/deny]}}], when: [{key: destination.namespace, values: [x]}]}]}`,
			},
			problems:     []string{`app/p0 rules[0].when[0]: "sourc.ip" is not a supported attribute: rule dropped`, `app/p1 rules[0].when[0]: "destination.namespace" is replaced by the policy's namespace: left out`},
			grpcProblems: []string{`"sourc.ip" is not a supported attribute`, `"destination.namespace" is replaced`},
		}.both(&check{allow: []req{{Path: "/ok"}}, deny: []req{{Path: "/deny"}, {Path: "/x"}}}),
		"a when condition without values fails closed": {
			specs:    []string{`{rules: [{when: [{key: source.ip}]}]}`},
			envoy:    denyAll,
			problems: []string{`rules[0].when[0]: no values: rule dropped`},
		},
		"an empty value fails closed": testCase{
			specs:        []string{`{rules: [{from: [{source: {principals: [""]}}]}]}`},
			problems:     []string{`principals[0]: empty value: rule dropped`},
			grpcProblems: []string{`principals[0]: empty value: rule dropped`},
		}.both(denyAll),
		"more than 16 service accounts fail closed": testCase{
			specs:        []string{`{rules: [{from: [{source: {serviceAccounts: [a,b,c,d,e,f,g,h,i,j,k,l,m,"n",o,p,q]}}]}]}`},
			problems:     []string{`serviceAccounts: may hold at most 16 values`},
			grpcProblems: []string{`serviceAccounts: may hold at most 16 values`},
		}.both(denyAll),
		"a bad service account fails closed": testCase{
			specs:        []string{`{rules: [{from: [{source: {serviceAccounts: [a/b/c, "x*", "/y"]}}]}]}`},
			problems:     []string{`serviceAccounts[0]: "a/b/c" is not a service account`, `serviceAccounts[1]: "x*": wildcards are not allowed`, `serviceAccounts[2]`},
			grpcProblems: []string{`serviceAccounts[0]`, `serviceAccounts[1]`, `serviceAccounts[2]`},
		}.both(denyAll),
		"serviceAccounts combined with principals drop an ALLOW rule": testCase{
			specs:        []string{`{rules: [{from: [{source: {serviceAccounts: [a], principals: ["*"]}}]}]}`},
			problems:     []string{`from[0].source.serviceAccounts: serviceAccounts cannot be combined with principals or namespaces: rule dropped`},
			grpcProblems: []string{`serviceAccounts cannot be combined`},
		}.both(&check{deny: []req{{ID: sp("app", "a")}}}),
		"serviceAccounts combined with namespaces are left out of a DENY rule": testCase{
			specs:        []string{`{action: DENY, rules: [{from: [{source: {serviceAccounts: [a], namespaces: [app]}}]}]}`},
			problems:     []string{`serviceAccounts cannot be combined with principals or namespaces: left out`},
			grpcProblems: []string{`serviceAccounts cannot be combined`},
		}.both(&check{allow: []req{{ID: sp("other", "a")}}, deny: []req{{ID: sp("app", "b")}}}),
		"a missing or empty source fails closed": {
			specs:    []string{`{rules: [{from: [{}]}, {from: [{source: {}}]}]}`},
			envoy:    denyAll,
			problems: []string{`rules[0].from[0].source: source is missing: rule dropped`, `rules[1].from[0].source: source is empty: rule dropped`},
		},
		"a missing operation in a DENY rule matches any operation": {
			specs:    []string{`{action: DENY, rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/bad]}}], to: [{}]}]}`},
			envoy:    &check{allow: []req{{ID: sp("app", "a")}}, deny: []req{{ID: sp("app", "bad")}}},
			problems: []string{`rules[0].to[0].operation: operation is missing: left out`},
		},
		"bad path templates fail closed": {
			specs:    []string{`{rules: [{to: [{operation: {paths: ["/a/{*}x", "/{**}/{*}", "a/{*}", "/a=b/{*}", "/a/{id}"]}}]}]}`},
			envoy:    denyAll,
			problems: []string{`paths[0]: "/a/{*}x": { and } may only appear as {*} or {**}`, `paths[1]: "/{**}/{*}": {**} must be the last template operator`, `paths[2]: "a/{*}": a path template must start with /`, `paths[3]`, `paths[4]: "/a/{id}": { and } may only appear as {*} or {**}`},
		},
		"bad header keys fail closed": {
			specs:    []string{`{rules: [{when: [{key: "request.headers[]", values: [a]}]}, {when: [{key: "request.headersX", values: [a]}]}]}`},
			envoy:    denyAll,
			problems: []string{`rules[0].when[0]: "request.headers[]" must have the form`, `rules[1].when[0]: "request.headersX"`},
		},
		"a bad metadata key fails closed": {
			specs:    []string{`{rules: [{when: [{key: "experimental.envoy.filters.x", values: [a]}]}]}`},
			envoy:    denyAll,
			problems: []string{`"experimental.envoy.filters.x" must have the form`},
		},
	})
}

// TestOneBadPolicyOfMany: of 1,000 policies one is invalid: its rule is
// dropped and reported, the others apply.
func TestOneBadPolicyOfMany(t *testing.T) {
	specs := make([]string, 1000)
	for i := range specs {
		specs[i] = fmt.Sprintf(`{rules: [{to: [{operation: {paths: [/p%d]}}]}]}`, i)
	}
	specs[500] = `{rules: [{to: [{operation: {paths: [/p500], ports: [bad]}}]}]}`
	policies := parse(t, specs...)
	for _, flavor := range []Flavor{Envoy, GRPC} {
		opts := Options{TrustDomain: td, Flavor: flavor}
		rules := rbacOf(t, policies, opts, false)
		allowed := func(path string) bool {
			return allowed(t, flavor, false, rules, req{Path: path})
		}
		if !allowed("/p0") || !allowed("/p999") || allowed("/p500") {
			t.Errorf("%s: /p0 %t, /p999 %t, /p500 %t; want true, true, false", flavor, allowed("/p0"), allowed("/p999"), allowed("/p500"))
		}
		problems := Check(policies, opts)
		if len(problems) != 1 || !strings.HasPrefix(problems[0].String(), "app/p500 rules[0].to[0].operation.ports[0]") {
			t.Errorf("%s: problems %v", flavor, problems)
		}
	}
}
