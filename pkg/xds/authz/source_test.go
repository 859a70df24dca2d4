package authz

import "testing"

const otherTD = "spiffe://other.td/ns/"

func TestSource(t *testing.T) {
	plaintext := req{}
	run(t, map[string]testCase{
		"principals allow the named identity only": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/client]}}]}]}`},
		}.both(&check{
			allow: []req{{ID: sp("app", "client")}},
			deny:  []req{{ID: sp("app", "other")}, {ID: sp("app", "client") + "x"}, plaintext},
		}),
		"principal wildcards are prefixes and suffixes": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: ["cluster.local/ns/app/*", "*/sa/admin"]}}]}]}`},
		}.both(&check{
			allow: []req{{ID: sp("app", "x")}, {ID: sp("other", "admin")}, {ID: otherTD + "x/sa/admin"}},
			deny:  []req{{ID: sp("other", "x")}, {ID: sp("other", "admins")}, plaintext},
		}),
		"a principal * is any identity but none": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("a", "b")}, {ID: otherTD + "a/sa/b"}}, deny: []req{plaintext}}),
		"notPrincipals let callers without an identity through, as in Istio": testCase{
			specs: []string{`{rules: [{from: [{source: {notPrincipals: [cluster.local/ns/app/sa/bad]}}]}]}`},
		}.both(&check{allow: []req{plaintext, {ID: sp("app", "good")}}, deny: []req{{ID: sp("app", "bad")}}}),
		"a DENY on principals also denies callers without an identity": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/bad]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("app", "good")}}, deny: []req{{ID: sp("app", "bad")}, plaintext}}),
		"a DENY on notPrincipals denies every other caller": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {notPrincipals: [cluster.local/ns/app/sa/good]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("app", "good")}}, deny: []req{{ID: sp("app", "x")}, plaintext}}),
		"cluster.local in a principal is the local trust domain on Envoy, as in Istio, literal on gRPC": {
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/c, "exa*/ns/app/sa/d"]}}]}]}`},
			td:    "example.org",
			envoy: &check{
				allow: []req{{ID: "spiffe://example.org/ns/app/sa/c"}, {ID: "spiffe://example.org/ns/app/sa/d"}},
				deny:  []req{{ID: sp("app", "c")}, {ID: sp("app", "d")}},
			},
			grpc: &check{allow: []req{{ID: sp("app", "c")}}, deny: []req{{ID: "spiffe://example.org/ns/app/sa/c"}}},
		},

		"namespaces match the namespace in any trust domain on Envoy, in ours only where gRPC grants": {
			specs: []string{`{rules: [{from: [{source: {namespaces: [app]}}]}]}`},
			envoy: &check{allow: []req{{ID: sp("app", "x")}, {ID: otherTD + "app/sa/x"}}, deny: []req{{ID: sp("other", "x")}, {ID: sp("ap", "x")}, plaintext}},
			grpc:  &check{allow: []req{{ID: sp("app", "x")}}, deny: []req{{ID: otherTD + "app/sa/x"}, {ID: sp("other", "x")}, plaintext}},
		},
		"namespace wildcards match any text": testCase{
			specs: []string{`{rules: [{from: [{source: {namespaces: ["ap*", "*-prod", "a*z"]}}]}]}`},
		}.both(&check{
			allow: []req{{ID: sp("app", "x")}, {ID: sp("ap", "x")}, {ID: sp("web-prod", "x")}, {ID: sp("abcz", "x")}},
			deny:  []req{{ID: sp("bpp", "x")}, {ID: sp("prod", "x")}, plaintext},
		}),
		"a namespace * is any namespace": testCase{
			specs: []string{`{rules: [{from: [{source: {namespaces: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("a", "b")}}, deny: []req{plaintext}}),
		"notNamespaces exclude the namespace in any trust domain": testCase{
			specs: []string{`{rules: [{from: [{source: {notNamespaces: [bad]}}]}]}`},
		}.both(&check{allow: []req{plaintext, {ID: sp("app", "x")}}, deny: []req{{ID: sp("bad", "x")}, {ID: otherTD + "bad/sa/x"}}}),
		"a DENY on namespaces denies the namespace in any trust domain and callers without an identity": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {namespaces: [bad]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("app", "x")}}, deny: []req{{ID: sp("bad", "x")}, {ID: otherTD + "bad/sa/x"}, plaintext}}),
		"a DENY on notNamespaces denies other namespaces, and ours only in our trust domain on gRPC": {
			specs: []string{`{action: DENY, rules: [{from: [{source: {notNamespaces: [app]}}]}]}`},
			envoy: &check{allow: []req{{ID: sp("app", "x")}, {ID: otherTD + "app/sa/x"}}, deny: []req{{ID: sp("bad", "x")}, plaintext}},
			grpc:  &check{allow: []req{{ID: sp("app", "x")}}, deny: []req{{ID: otherTD + "app/sa/x"}, {ID: sp("bad", "x")}, plaintext}},
		},

		"serviceAccounts are <sa> of the policy's namespace or <ns>/<sa>": {
			specs: []string{`{rules: [{from: [{source: {serviceAccounts: [client, other/sa2]}}]}]}`},
			envoy: &check{
				allow: []req{{ID: sp("app", "client")}, {ID: sp("other", "sa2")}, {ID: otherTD + "app/sa/client"}},
				deny:  []req{{ID: sp("app", "client2")}, {ID: sp("app", "clien")}, {ID: sp("other", "client")}, plaintext},
			},
			grpc: &check{
				allow: []req{{ID: sp("app", "client")}, {ID: sp("other", "sa2")}},
				deny:  []req{{ID: otherTD + "app/sa/client"}, {ID: sp("app", "client2")}, {ID: sp("other", "client")}, plaintext},
			},
		},
		"notServiceAccounts exclude the service account": testCase{
			specs: []string{`{rules: [{from: [{source: {notServiceAccounts: [bad]}}]}]}`},
		}.both(&check{allow: []req{plaintext, {ID: sp("app", "x")}, {ID: sp("other", "bad")}}, deny: []req{{ID: sp("app", "bad")}}}),
		"a DENY on serviceAccounts denies it in any trust domain and callers without an identity": testCase{
			specs: []string{`{action: DENY, rules: [{from: [{source: {serviceAccounts: [bad]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("app", "x")}}, deny: []req{{ID: sp("app", "bad")}, {ID: otherTD + "app/sa/bad"}, plaintext}}),

		"trustDomains match the trust domain, with wildcards, on Envoy": {
			specs:        []string{`{rules: [{from: [{source: {trustDomains: [example.org, "*.net", "corp.*"]}}]}]}`},
			envoy:        &check{allow: []req{{ID: "spiffe://example.org/ns/a/sa/b"}, {ID: "spiffe://x.net/ns/a/sa/b"}, {ID: "spiffe://corp.io/ns/a/sa/b"}}, deny: []req{{ID: "spiffe://example.com/ns/a/sa/b"}, {ID: "spiffe://example.org.evil/ns/a/sa/b"}, plaintext}},
			grpc:         &check{deny: []req{{ID: "spiffe://example.org/ns/a/sa/b"}}},
			grpcProblems: []string{"rules[0].from[0].source.trustDomains: trustDomains is not supported on proxyless gRPC: rule dropped"},
		},
		"notTrustDomains exclude the trust domain": {
			specs: []string{`{rules: [{from: [{source: {notTrustDomains: [bad.org]}}]}]}`},
			envoy: &check{allow: []req{plaintext, {ID: "spiffe://good.org/ns/a/sa/b"}}, deny: []req{{ID: "spiffe://bad.org/ns/a/sa/b"}}},
		},
		"a DENY on trustDomains also denies callers without an identity": {
			specs: []string{`{action: DENY, rules: [{from: [{source: {trustDomains: [bad.org]}}]}]}`},
			envoy: &check{allow: []req{{ID: sp("a", "b")}}, deny: []req{{ID: "spiffe://bad.org/ns/a/sa/b"}, plaintext}},
		},

		"ipBlocks match the connection's peer address on Envoy": {
			specs:        []string{`{rules: [{from: [{source: {ipBlocks: [10.0.0.0/8, 192.168.1.1, "2001:db8::/32"]}}]}]}`},
			envoy:        &check{allow: []req{{Src: "10.1.2.3"}, {Src: "192.168.1.1"}, {Src: "2001:db8::1"}}, deny: []req{{Src: "192.168.1.2"}, {Src: "11.0.0.1", Remote: "10.0.0.1"}}},
			tcp:          &check{allow: []req{{Src: "10.1.2.3"}}, deny: []req{{Src: "192.168.1.2"}}},
			grpc:         &check{deny: []req{{Src: "10.1.2.3"}}},
			grpcProblems: []string{"from[0].source.ipBlocks: ipBlocks is not supported on proxyless gRPC"},
		},
		"notIpBlocks exclude the addresses": {
			specs: []string{`{rules: [{from: [{source: {notIpBlocks: [10.0.0.0/8]}}]}]}`},
			envoy: &check{allow: []req{{Src: "192.168.1.1"}}, deny: []req{{Src: "10.0.0.9"}}},
		},
		"remoteIpBlocks match the original client address": {
			specs: []string{`{rules: [{from: [{source: {remoteIpBlocks: [1.2.3.0/24]}}]}]}`},
			envoy: &check{allow: []req{{Remote: "1.2.3.4"}}, deny: []req{{}, {Src: "1.2.3.4", Remote: "5.6.7.8"}}},
		},
		"notRemoteIpBlocks exclude the original client addresses": {
			specs: []string{`{rules: [{from: [{source: {notRemoteIpBlocks: [1.2.3.0/24]}}]}]}`},
			envoy: &check{allow: []req{{Src: "1.2.3.4", Remote: "5.6.7.8"}}, deny: []req{{Remote: "1.2.3.4"}}},
		},

		"all fields of a source must match, any source may": {
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/a], ipBlocks: [10.0.0.0/8]}}, {source: {namespaces: [other]}}]}]}`},
			envoy: &check{allow: []req{{ID: sp("app", "a")}, {ID: sp("other", "x"), Src: "1.1.1.1"}}, deny: []req{{ID: sp("app", "a"), Src: "1.1.1.1"}, {ID: sp("app", "b")}}},
		},
	})
}
