package authz

import "testing"

func TestOperation(t *testing.T) {
	run(t, map[string]testCase{
		"hosts match the authority ignoring case, on Envoy HTTP": {
			specs:        []string{`{rules: [{to: [{operation: {hosts: [echo.app, "*.example.com", "api.*"]}}]}]}`},
			envoy:        &check{allow: []req{{Host: "ECHO.app"}, {Host: "a.Example.com"}, {Host: "api.x"}}, deny: []req{{Host: "echo.apps"}, {Host: "example.com"}}},
			tcp:          &check{deny: []req{{}}},
			grpc:         &check{deny: []req{{}}},
			grpcProblems: []string{"to[0].operation.hosts: hosts is not supported on proxyless gRPC: rule dropped"},
		},
		"notHosts exclude the authority": {
			specs: []string{`{rules: [{to: [{operation: {notHosts: [bad.app]}}]}]}`},
			envoy: &check{allow: []req{{}}, deny: []req{{Host: "BAD.app"}}},
		},
		"a host * is any authority": {
			specs: []string{`{rules: [{to: [{operation: {hosts: ["*"]}}]}]}`},
			envoy: &check{allow: []req{{Host: "x"}}},
		},

		"methods match exactly, or as prefix and suffix": testCase{
			specs: []string{`{rules: [{to: [{operation: {methods: [POST, "PU*", "*ETE"]}}]}]}`},
		}.both(&check{allow: []req{{Method: "POST"}, {Method: "PUT"}, {Method: "DELETE"}}, deny: []req{{Method: "GET"}, {Method: "post"}}}),
		"notMethods exclude the method": testCase{
			specs: []string{`{rules: [{to: [{operation: {notMethods: [GET]}}]}]}`},
		}.both(&check{allow: []req{{Method: "POST"}}, deny: []req{{Method: "GET"}}}),
		"a method * is any method": testCase{
			specs: []string{`{rules: [{to: [{operation: {methods: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{Method: "POST"}}}),

		"paths match exactly, or as prefix and suffix, without the query": testCase{
			specs: []string{`{rules: [{to: [{operation: {paths: [/exact, "/pre/*", "*/suf"]}}]}]}`},
		}.both(&check{
			allow: []req{{Path: "/exact"}, {Path: "/exact?x=1"}, {Path: "/pre/a/b"}, {Path: "/x/suf"}},
			deny:  []req{{Path: "/exactx"}, {Path: "/pre"}, {Path: "/suf/x"}, {Path: "/EXACT"}},
		}),
		"notPaths exclude the path": testCase{
			specs: []string{`{rules: [{to: [{operation: {notPaths: ["/admin/*"]}}]}]}`},
		}.both(&check{allow: []req{{Path: "/a"}}, deny: []req{{Path: "/admin/x"}}}),
		"a path * is any path": testCase{
			specs: []string{`{rules: [{to: [{operation: {paths: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{Path: "/x"}}}),
		"path templates match segments on Envoy and drop the rule on gRPC": {
			specs: []string{`{rules: [{to: [{operation: {paths: ["/api/{*}/items/{**}", "/v/{*}/"]}}]}]}`},
			envoy: &check{
				allow: []req{{Path: "/api/v1/items/a/b"}, {Path: "/api/v1/items/"}, {Path: "/v/x/"}},
				deny:  []req{{Path: "/api/v1/v2/items/a"}, {Path: "/api/items/a"}, {Path: "/v/x"}},
			},
			grpc:         &check{deny: []req{{Path: "/api/v1/items/a"}}},
			grpcProblems: []string{`paths[0]: gRPC cannot match path templates: rule dropped`, `paths[1]: gRPC cannot match path templates`},
		},

		"ports match the destination port, on HTTP and TCP": {
			specs: []string{`{rules: [{to: [{operation: {ports: ["8080", "9000"]}}]}]}`},
			envoy: &check{allow: []req{{Port: 8080}, {Port: 9000}}, deny: []req{{Port: 9090}}},
			tcp:   &check{allow: []req{{Port: 8080}}, deny: []req{{Port: 9090}}},
			grpc:  &check{allow: []req{{Port: 8080}}, deny: []req{{Port: 9090}}},
		},
		"notPorts exclude the port": {
			specs: []string{`{rules: [{to: [{operation: {notPorts: ["9090"]}}]}]}`},
			envoy: &check{allow: []req{{Port: 8080}}, deny: []req{{Port: 9090}}},
			tcp:   &check{allow: []req{{Port: 8080}}, deny: []req{{Port: 9090}}},
			grpc:  &check{allow: []req{{Port: 8080}}, deny: []req{{Port: 9090}}},
		},

		"all fields of an operation must match, any operation may": testCase{
			specs: []string{`{rules: [{to: [{operation: {methods: [GET], paths: [/a]}}, {operation: {ports: ["9000"]}}]}]}`},
		}.both(&check{allow: []req{{Path: "/a"}, {Path: "/b", Port: 9000}}, deny: []req{{Path: "/b"}, {Method: "POST", Path: "/a"}}}),
		"a rule needs a matching source and a matching operation": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/a]}}], to: [{operation: {paths: [/a]}}]}]}`},
		}.both(&check{allow: []req{{ID: sp("app", "a"), Path: "/a"}}, deny: []req{{ID: sp("app", "a"), Path: "/b"}, {ID: sp("app", "b"), Path: "/a"}}}),
	})
}
