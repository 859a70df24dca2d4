package authz

import "testing"

func TestWhen(t *testing.T) {
	run(t, map[string]testCase{
		"source.ip and remote.ip match the addresses": {
			specs: []string{`{rules: [{when: [{key: source.ip, values: [10.0.0.0/8]}, {key: remote.ip, notValues: [1.2.3.4]}]}]}`},
			envoy: &check{allow: []req{{Src: "10.0.0.1"}, {Src: "10.0.0.1", Remote: "5.5.5.5"}}, deny: []req{{Src: "11.0.0.1"}, {Src: "10.0.0.1", Remote: "1.2.3.4"}}},
			tcp:   &check{allow: []req{{Src: "10.0.0.1"}}, deny: []req{{Src: "11.0.0.1"}}},
		},
		"source.principal, source.namespace and source.serviceAccount match the identity": {
			specs: []string{`{rules: [{when: [{key: source.principal, values: ["cluster.local/ns/app/*"]}, {key: source.namespace, notValues: [bad]}, {key: source.serviceAccount, values: [a, app/b]}]}]}`},
			envoy: &check{allow: []req{{ID: sp("app", "a")}, {ID: sp("app", "b")}}, deny: []req{{ID: sp("app", "c")}, {ID: sp("bad", "a")}, {}}},
		},
		"source.trustDomain matches the trust domain": {
			specs: []string{`{rules: [{when: [{key: source.trustDomain, values: [cluster.local]}]}]}`},
			envoy: &check{allow: []req{{ID: sp("a", "b")}}, deny: []req{{ID: otherTD + "a/sa/b"}, {}}},
		},
		"a DENY on source identity keys also denies callers without an identity": {
			specs: []string{`{action: DENY, rules: [{when: [{key: source.namespace, values: [bad]}]}]}`},
			envoy: &check{allow: []req{{ID: sp("app", "a")}}, deny: []req{{ID: sp("bad", "a")}, {}}},
		},
		"request.headers match a header": {
			specs: []string{`{rules: [{when: [{key: "request.headers[X-User]", values: [alice, "adm*"]}, {key: "request.headers[x-debug]", notValues: ["*"]}]}]}`},
			envoy: &check{
				allow: []req{{Headers: map[string]string{"x-user": "alice"}}, {Headers: map[string]string{"x-user": "admin"}}},
				deny:  []req{{}, {Headers: map[string]string{"x-user": "bob"}}, {Headers: map[string]string{"x-user": "alice", "x-debug": ""}}},
			},
			tcp: &check{deny: []req{{}}},
		},
		"destination.ip, destination.port and connection.sni match the connection": {
			specs: []string{`{rules: [{when: [{key: destination.ip, values: [10.0.0.2]}, {key: destination.port, values: ["8080"]}, {key: connection.sni, values: ["*.app"]}]}]}`},
			envoy: &check{allow: []req{{SNI: "echo.app"}}, deny: []req{{}, {SNI: "echo.app", Port: 9000}, {SNI: "echo.app", Dst: "10.0.0.3"}}},
			tcp:   &check{allow: []req{{SNI: "echo.app"}}, deny: []req{{}}},
		},
		"experimental.envoy.filters keys match dynamic metadata": {
			specs: []string{`{rules: [{when: [{key: "experimental.envoy.filters.network.mysql_proxy[db.table]", values: ["[update]", "read*"]}]}]}`},
			envoy: &check{
				allow: []req{
					{Metadata: map[string]map[string]any{"envoy.filters.network.mysql_proxy": {"db.table": []string{"select", "update"}}}},
					{Metadata: map[string]map[string]any{"envoy.filters.network.mysql_proxy": {"db.table": "readonly"}}},
				},
				deny: []req{{}, {Metadata: map[string]map[string]any{"envoy.filters.network.mysql_proxy": {"db.table": []string{"select"}}}}},
			},
		},
		"when conditions drop an ALLOW rule on gRPC": {
			specs:        []string{`{rules: [{when: [{key: source.ip, values: [10.0.0.0/8]}]}]}`},
			grpc:         &check{deny: []req{{Src: "10.0.0.1"}}},
			grpcProblems: []string{"rules[0].when[0]: source.ip is not supported on proxyless gRPC: rule dropped"},
		},
		"when conditions gRPC could evaluate drop an ALLOW rule on gRPC too, as in grpcgen": {
			specs:        []string{`{rules: [{when: [{key: source.principal, values: ["*"]}, {key: destination.port, values: ["8080"]}]}]}`},
			envoy:        &check{allow: []req{{ID: sp("a", "b")}}, deny: []req{{}}},
			grpc:         &check{deny: []req{{ID: sp("a", "b")}}},
			grpcProblems: []string{"rules[0].when[0]: source.principal is not supported on proxyless gRPC: rule dropped", "when[1]: destination.port is not"},
		},
		"when conditions are left out of a DENY rule on gRPC, which denies more": {
			specs:        []string{`{action: DENY, rules: [{to: [{operation: {paths: [/admin]}}], when: [{key: "request.headers[x]", values: ["y"]}]}]}`},
			grpc:         &check{allow: []req{{Path: "/a"}}, deny: []req{{Path: "/admin"}}},
			grpcProblems: []string{"rules[0].when[0]: request.headers[x] is not supported on proxyless gRPC: left out"},
		},
	})
}
