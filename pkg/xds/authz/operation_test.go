package authz

import "testing"

func TestOperation(t *testing.T) {
	run(t, map[string]testCase{
		"hosts match the authority ignoring case, on Envoy HTTP": {
			specs:        []string{`{rules: [{to: [{operation: {hosts: [echo.app, "*.example.com", "api.*"]}}]}]}`},
			envoy:        &check{allow: []req{{host: "ECHO.app"}, {host: "a.Example.com"}, {host: "api.x"}}, deny: []req{{host: "echo.apps"}, {host: "example.com"}}},
			tcp:          &check{deny: []req{{}}},
			grpc:         &check{deny: []req{{}}},
			grpcProblems: []string{"to[0].operation.hosts: hosts is not supported on proxyless gRPC: rule dropped"},
		},
		"notHosts exclude the authority": {
			specs: []string{`{rules: [{to: [{operation: {notHosts: [bad.app]}}]}]}`},
			envoy: &check{allow: []req{{}}, deny: []req{{host: "BAD.app"}}},
		},
		"a host * is any authority": {
			specs: []string{`{rules: [{to: [{operation: {hosts: ["*"]}}]}]}`},
			envoy: &check{allow: []req{{host: "x"}}},
		},

		"methods match exactly, or as prefix and suffix": testCase{
			specs: []string{`{rules: [{to: [{operation: {methods: [POST, "PU*", "*ETE"]}}]}]}`},
		}.both(&check{allow: []req{{method: "POST"}, {method: "PUT"}, {method: "DELETE"}}, deny: []req{{method: "GET"}, {method: "post"}}}),
		"notMethods exclude the method": testCase{
			specs: []string{`{rules: [{to: [{operation: {notMethods: [GET]}}]}]}`},
		}.both(&check{allow: []req{{method: "POST"}}, deny: []req{{method: "GET"}}}),
		"a method * is any method": testCase{
			specs: []string{`{rules: [{to: [{operation: {methods: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{method: "POST"}}}),

		"paths match exactly, or as prefix and suffix, without the query": testCase{
			specs: []string{`{rules: [{to: [{operation: {paths: [/exact, "/pre/*", "*/suf"]}}]}]}`},
		}.both(&check{
			allow: []req{{path: "/exact"}, {path: "/exact?x=1"}, {path: "/pre/a/b"}, {path: "/x/suf"}},
			deny:  []req{{path: "/exactx"}, {path: "/pre"}, {path: "/suf/x"}, {path: "/EXACT"}},
		}),
		"notPaths exclude the path": testCase{
			specs: []string{`{rules: [{to: [{operation: {notPaths: ["/admin/*"]}}]}]}`},
		}.both(&check{allow: []req{{path: "/a"}}, deny: []req{{path: "/admin/x"}}}),
		"a path * is any path": testCase{
			specs: []string{`{rules: [{to: [{operation: {paths: ["*"]}}]}]}`},
		}.both(&check{allow: []req{{path: "/x"}}}),
		"path templates match segments on Envoy and drop the rule on gRPC": {
			specs: []string{`{rules: [{to: [{operation: {paths: ["/api/{*}/items/{**}", "/v/{*}/"]}}]}]}`},
			envoy: &check{
				allow: []req{{path: "/api/v1/items/a/b"}, {path: "/api/v1/items/"}, {path: "/v/x/"}},
				deny:  []req{{path: "/api/v1/v2/items/a"}, {path: "/api/items/a"}, {path: "/v/x"}},
			},
			grpc:         &check{deny: []req{{path: "/api/v1/items/a"}}},
			grpcProblems: []string{`paths[0]: gRPC cannot match path templates: rule dropped`, `paths[1]: gRPC cannot match path templates`},
		},

		"ports match the destination port, on HTTP and TCP": {
			specs: []string{`{rules: [{to: [{operation: {ports: ["8080", "9000"]}}]}]}`},
			envoy: &check{allow: []req{{port: 8080}, {port: 9000}}, deny: []req{{port: 9090}}},
			tcp:   &check{allow: []req{{port: 8080}}, deny: []req{{port: 9090}}},
			grpc:  &check{allow: []req{{port: 8080}}, deny: []req{{port: 9090}}},
		},
		"notPorts exclude the port": {
			specs: []string{`{rules: [{to: [{operation: {notPorts: ["9090"]}}]}]}`},
			envoy: &check{allow: []req{{port: 8080}}, deny: []req{{port: 9090}}},
			tcp:   &check{allow: []req{{port: 8080}}, deny: []req{{port: 9090}}},
			grpc:  &check{allow: []req{{port: 8080}}, deny: []req{{port: 9090}}},
		},

		"all fields of an operation must match, any operation may": testCase{
			specs: []string{`{rules: [{to: [{operation: {methods: [GET], paths: [/a]}}, {operation: {ports: ["9000"]}}]}]}`},
		}.both(&check{allow: []req{{path: "/a"}, {path: "/b", port: 9000}}, deny: []req{{path: "/b"}, {method: "POST", path: "/a"}}}),
		"a rule needs a matching source and a matching operation": testCase{
			specs: []string{`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/a]}}], to: [{operation: {paths: [/a]}}]}]}`},
		}.both(&check{allow: []req{{id: sp("app", "a"), path: "/a"}}, deny: []req{{id: sp("app", "a"), path: "/b"}, {id: sp("app", "b"), path: "/a"}}}),
	})
}
