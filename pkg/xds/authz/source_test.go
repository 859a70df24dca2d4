package authz

import "testing"

const otherTD = "spiffe://other.td/ns/"

func TestSource(t *testing.T) {
	plaintext := req{}
	run(t, map[string]testCase{
		"principals allow the named identity only": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/client]}}]}]}`},
		}.both(&check{
			allow: []req{{id: sp("app", "client")}},
			deny:  []req{{id: sp("app", "other")}, {id: sp("app", "client") + "x"}, plaintext},
		}),
		"principal wildcards are prefixes and suffixes": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: ["cluster.local/ns/app/*", "*/sa/admin"]}}]}]}`},
		}.both(&check{
			allow: []req{{id: sp("app", "x")}, {id: sp("other", "admin")}, {id: otherTD + "x/sa/admin"}},
			deny:  []req{{id: sp("other", "x")}, {id: sp("other", "admins")}, plaintext},
		}),
		"a principal * is any identity but none": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{id: sp("a", "b")}, {id: otherTD + "a/sa/b"}}, deny: []req{plaintext}}),
		"notPrincipals let callers without an identity through, as in Istio": testCase{
			specs: []string{`{rules: [{from: [{source: {notPrincipals: [cluster.local/ns/app/sa/bad]}}]}]}`},
		}.both(&check{allow: []req{plaintext, {id: sp("app", "good")}}, deny: []req{{id: sp("app", "bad")}}}),
		"a DENY on principals also denies callers without an identity": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/bad]}}]}]}`},
		}.both(&check{allow: []req{{id: sp("app", "good")}}, deny: []req{{id: sp("app", "bad")}, plaintext}}),
		"a DENY on notPrincipals denies every other caller": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {notPrincipals: [cluster.local/ns/app/sa/good]}}]}]}`},
		}.both(&check{allow: []req{{id: sp("app", "good")}}, deny: []req{{id: sp("app", "x")}, plaintext}}),
		"cluster.local in a principal is the local trust domain on Envoy, as in Istio, literal on gRPC": {
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/c, "exa*/ns/app/sa/d"]}}]}]}`},
			td:    "example.org",
			envoy: &check{
				allow: []req{{id: "spiffe://example.org/ns/app/sa/c"}, {id: "spiffe://example.org/ns/app/sa/d"}},
				deny:  []req{{id: sp("app", "c")}, {id: sp("app", "d")}},
			},
			grpc: &check{allow: []req{{id: sp("app", "c")}}, deny: []req{{id: "spiffe://example.org/ns/app/sa/c"}}},
		},

		"namespaces match the namespace in any trust domain on Envoy, in ours only where gRPC grants": {
			specs: []string{`{rules: [{from: [{source: {namespaces: [app]}}]}]}`},
			envoy: &check{allow: []req{{id: sp("app", "x")}, {id: otherTD + "app/sa/x"}}, deny: []req{{id: sp("other", "x")}, {id: sp("ap", "x")}, plaintext}},
			grpc:  &check{allow: []req{{id: sp("app", "x")}}, deny: []req{{id: otherTD + "app/sa/x"}, {id: sp("other", "x")}, plaintext}},
		},
		"namespace wildcards match any text": testCase{
			specs: []string{`{rules: [{from: [{source: {namespaces: ["ap*", "*-prod", "a*z"]}}]}]}`},
		}.both(&check{
			allow: []req{{id: sp("app", "x")}, {id: sp("ap", "x")}, {id: sp("web-prod", "x")}, {id: sp("abcz", "x")}},
			deny:  []req{{id: sp("bpp", "x")}, {id: sp("prod", "x")}, plaintext},
		}),
		"a namespace * is any namespace": testCase{
			specs: []string{`{rules: [{from: [{source: {namespaces: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{id: sp("a", "b")}}, deny: []req{plaintext}}),
		"notNamespaces exclude the namespace in any trust domain": testCase{
			specs: []string{`{rules: [{from: [{source: {notNamespaces: [bad]}}]}]}`},
		}.both(&check{allow: []req{plaintext, {id: sp("app", "x")}}, deny: []req{{id: sp("bad", "x")}, {id: otherTD + "bad/sa/x"}}}),
		"a DENY on namespaces denies the namespace in any trust domain and callers without an identity": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {namespaces: [bad]}}]}]}`},
		}.both(&check{allow: []req{{id: sp("app", "x")}}, deny: []req{{id: sp("bad", "x")}, {id: otherTD + "bad/sa/x"}, plaintext}}),
		"a DENY on notNamespaces denies other namespaces, and ours only in our trust domain on gRPC": {
			specs: []string{`{action: DENY, rules: [{from: [{source: {notNamespaces: [app]}}]}]}`},
			envoy: &check{allow: []req{{id: sp("app", "x")}, {id: otherTD + "app/sa/x"}}, deny: []req{{id: sp("bad", "x")}, plaintext}},
			grpc:  &check{allow: []req{{id: sp("app", "x")}}, deny: []req{{id: otherTD + "app/sa/x"}, {id: sp("bad", "x")}, plaintext}},
		},

		"serviceAccounts are <sa> of the policy's namespace or <ns>/<sa>": {
			specs: []string{`{rules: [{from: [{source: {serviceAccounts: [client, other/sa2]}}]}]}`},
			envoy: &check{
				allow: []req{{id: sp("app", "client")}, {id: sp("other", "sa2")}, {id: otherTD + "app/sa/client"}},
				deny:  []req{{id: sp("app", "client2")}, {id: sp("app", "clien")}, {id: sp("other", "client")}, plaintext},
			},
			grpc: &check{
				allow: []req{{id: sp("app", "client")}, {id: sp("other", "sa2")}},
				deny:  []req{{id: otherTD + "app/sa/client"}, {id: sp("app", "client2")}, {id: sp("other", "client")}, plaintext},
			},
		},
		"notServiceAccounts exclude the service account": testCase{
			specs: []string{`{rules: [{from: [{source: {notServiceAccounts: [bad]}}]}]}`},
		}.both(&check{allow: []req{plaintext, {id: sp("app", "x")}, {id: sp("other", "bad")}}, deny: []req{{id: sp("app", "bad")}}}),
		"a DENY on serviceAccounts denies it in any trust domain and callers without an identity": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {serviceAccounts: [bad]}}]}]}`},
		}.both(&check{allow: []req{{id: sp("app", "x")}}, deny: []req{{id: sp("app", "bad")}, {id: otherTD + "app/sa/bad"}, plaintext}}),

		"trustDomains match the trust domain, with wildcards, on Envoy": {
			specs:        []string{`{rules: [{from: [{source: {trustDomains: [example.org, "*.net", "corp.*"]}}]}]}`},
			envoy:        &check{allow: []req{{id: "spiffe://example.org/ns/a/sa/b"}, {id: "spiffe://x.net/ns/a/sa/b"}, {id: "spiffe://corp.io/ns/a/sa/b"}}, deny: []req{{id: "spiffe://example.com/ns/a/sa/b"}, {id: "spiffe://example.org.evil/ns/a/sa/b"}, plaintext}},
			grpc:         &check{deny: []req{{id: "spiffe://example.org/ns/a/sa/b"}}},
			grpcProblems: []string{"rules[0].from[0].source.trustDomains: trustDomains is not supported on proxyless gRPC: rule dropped"},
		},
		"notTrustDomains exclude the trust domain": {
			specs: []string{`{rules: [{from: [{source: {notTrustDomains: [bad.org]}}]}]}`},
			envoy: &check{allow: []req{plaintext, {id: "spiffe://good.org/ns/a/sa/b"}}, deny: []req{{id: "spiffe://bad.org/ns/a/sa/b"}}},
		},
		"a DENY on trustDomains also denies callers without an identity": {
			specs: []string{`{action: DENY, rules: [{from: [{source: {trustDomains: [bad.org]}}]}]}`},
			envoy: &check{allow: []req{{id: sp("a", "b")}}, deny: []req{{id: "spiffe://bad.org/ns/a/sa/b"}, plaintext}},
		},

		"ipBlocks match the connection's peer address on Envoy": {
			specs:        []string{`{rules: [{from: [{source: {ipBlocks: [10.0.0.0/8, 192.168.1.1, "2001:db8::/32"]}}]}]}`},
			envoy:        &check{allow: []req{{src: "10.1.2.3"}, {src: "192.168.1.1"}, {src: "2001:db8::1"}}, deny: []req{{src: "192.168.1.2"}, {src: "11.0.0.1", remote: "10.0.0.1"}}},
			tcp:          &check{allow: []req{{src: "10.1.2.3"}}, deny: []req{{src: "192.168.1.2"}}},
			grpc:         &check{deny: []req{{src: "10.1.2.3"}}},
			grpcProblems: []string{"from[0].source.ipBlocks: ipBlocks is not supported on proxyless gRPC"},
		},
		"notIpBlocks exclude the addresses": {
			specs: []string{`{rules: [{from: [{source: {notIpBlocks: [10.0.0.0/8]}}]}]}`},
			envoy: &check{allow: []req{{src: "192.168.1.1"}}, deny: []req{{src: "10.0.0.9"}}},
		},
		"remoteIpBlocks match the original client address": {
			specs: []string{`{rules: [{from: [{source: {remoteIpBlocks: [1.2.3.0/24]}}]}]}`},
			envoy: &check{allow: []req{{remote: "1.2.3.4"}}, deny: []req{{}, {src: "1.2.3.4", remote: "5.6.7.8"}}},
		},
		"notRemoteIpBlocks exclude the original client addresses": {
			specs: []string{`{rules: [{from: [{source: {notRemoteIpBlocks: [1.2.3.0/24]}}]}]}`},
			envoy: &check{allow: []req{{src: "1.2.3.4", remote: "5.6.7.8"}}, deny: []req{{remote: "1.2.3.4"}}},
		},

		"all fields of a source must match, any source may": {
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/a], ipBlocks: [10.0.0.0/8]}}, {source: {namespaces: [other]}}]}]}`},
			envoy: &check{allow: []req{{id: sp("app", "a")}, {id: sp("other", "x"), src: "1.1.1.1"}}, deny: []req{{id: sp("app", "a"), src: "1.1.1.1"}, {id: sp("app", "b")}}},
		},
	})
}
