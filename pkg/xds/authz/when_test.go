package authz

import "testing"

func TestWhen(t *testing.T) {
	run(t, map[string]testCase{
		"source.ip and remote.ip match the addresses": {
			specs: []string{`{rules: [{when: [{key: source.ip, values: [10.0.0.0/8]}, {key: remote.ip, notValues: [1.2.3.4]}]}]}`},
			envoy: &check{allow: []req{{src: "10.0.0.1"}, {src: "10.0.0.1", remote: "5.5.5.5"}}, deny: []req{{src: "11.0.0.1"}, {src: "10.0.0.1", remote: "1.2.3.4"}}},
			tcp:   &check{allow: []req{{src: "10.0.0.1"}}, deny: []req{{src: "11.0.0.1"}}},
		},
		"source.principal, source.namespace and source.serviceAccount match the identity": {
			specs: []string{`{rules: [{when: [{key: source.principal, values: ["cluster.local/ns/app/*"]}, {key: source.namespace, notValues: [bad]}, {key: source.serviceAccount, values: [a, app/b]}]}]}`},
			envoy: &check{allow: []req{{id: sp("app", "a")}, {id: sp("app", "b")}}, deny: []req{{id: sp("app", "c")}, {id: sp("bad", "a")}, {}}},
		},
		"source.trustDomain matches the trust domain": {
			specs: []string{`{rules: [{when: [{key: source.trustDomain, values: [cluster.local]}]}]}`},
			envoy: &check{allow: []req{{id: sp("a", "b")}}, deny: []req{{id: otherTD + "a/sa/b"}, {}}},
		},
		"a DENY on source identity keys also denies callers without an identity": {
			specs: []string{`{action: DENY, rules: [{when: [{key: source.namespace, values: [bad]}]}]}`},
			envoy: &check{allow: []req{{id: sp("app", "a")}}, deny: []req{{id: sp("bad", "a")}, {}}},
		},
		"request.headers match a header": {
			specs: []string{`{rules: [{when: [{key: "request.headers[X-User]", values: [alice, "adm*"]}, {key: "request.headers[x-debug]", notValues: ["*"]}]}]}`},
			envoy: &check{
				allow: []req{{headers: map[string]string{"x-user": "alice"}}, {headers: map[string]string{"x-user": "admin"}}},
				deny:  []req{{}, {headers: map[string]string{"x-user": "bob"}}, {headers: map[string]string{"x-user": "alice", "x-debug": ""}}},
			},
			tcp: &check{deny: []req{{}}},
		},
		"destination.ip, destination.port and connection.sni match the connection": {
			specs: []string{`{rules: [{when: [{key: destination.ip, values: [10.0.0.2]}, {key: destination.port, values: ["8080"]}, {key: connection.sni, values: ["*.app"]}]}]}`},
			envoy: &check{allow: []req{{sni: "echo.app"}}, deny: []req{{}, {sni: "echo.app", port: 9000}, {sni: "echo.app", dst: "10.0.0.3"}}},
			tcp:   &check{allow: []req{{sni: "echo.app"}}, deny: []req{{}}},
		},
		"experimental.envoy.filters keys match dynamic metadata": {
			specs: []string{`{rules: [{when: [{key: "experimental.envoy.filters.network.mysql_proxy[db.table]", values: ["[update]", "read*"]}]}]}`},
			envoy: &check{
				allow: []req{
					{metadata: map[string]map[string]any{"envoy.filters.network.mysql_proxy": {"db.table": []string{"select", "update"}}}},
					{metadata: map[string]map[string]any{"envoy.filters.network.mysql_proxy": {"db.table": "readonly"}}},
				},
				deny: []req{{}, {metadata: map[string]map[string]any{"envoy.filters.network.mysql_proxy": {"db.table": []string{"select"}}}}},
			},
		},
		"when conditions drop an ALLOW rule on gRPC": {
			specs:        []string{`{rules: [{when: [{key: source.ip, values: [10.0.0.0/8]}]}]}`},
			grpc:         &check{deny: []req{{src: "10.0.0.1"}}},
			grpcProblems: []string{"rules[0].when[0]: source.ip is not supported on proxyless gRPC: rule dropped"},
		},
		"when conditions gRPC could evaluate drop an ALLOW rule on gRPC too, as in grpcgen": {
			specs:        []string{`{rules: [{when: [{key: source.principal, values: ["*"]}, {key: destination.port, values: ["8080"]}]}]}`},
			envoy:        &check{allow: []req{{id: sp("a", "b")}}, deny: []req{{}}},
			grpc:         &check{deny: []req{{id: sp("a", "b")}}},
			grpcProblems: []string{"rules[0].when[0]: source.principal is not supported on proxyless gRPC: rule dropped", "when[1]: destination.port is not"},
		},
		"when conditions are left out of a DENY rule on gRPC, which denies more": {
			specs:        []string{`{action: DENY, rules: [{to: [{operation: {paths: [/admin]}}], when: [{key: "request.headers[x]", values: ["y"]}]}]}`},
			grpc:         &check{allow: []req{{path: "/a"}}, deny: []req{{path: "/admin"}}},
			grpcProblems: []string{"rules[0].when[0]: request.headers[x] is not supported on proxyless gRPC: left out"},
		},
	})
}
