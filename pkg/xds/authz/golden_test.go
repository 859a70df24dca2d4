package authz

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenScenarios are policy sets whose complete output is kept in
// testdata/golden/<name>.json, to show in review what a change changes.
var goldenScenarios = map[string][]string{
	"allow-and-deny": {
		`{rules: [{from: [{source: {principals: [cluster.local/ns/app/sa/client], namespaces: [web]}}], to: [{operation: {methods: [GET], paths: ["/api/*"], ports: ["8080"]}}]}]}`,
		`{action: DENY, rules: [{from: [{source: {notNamespaces: [app]}}], to: [{operation: {paths: ["/admin/*"]}}]}]}`,
	},
	"every-field": {
		`{rules: [{from: [{source: {principals: ["*"], notPrincipals: ["*/sa/bad"]}}, {source: {serviceAccounts: [sa], notServiceAccounts: [other/sa]}},
		                 {source: {namespaces: ["ap*"], notNamespaces: [kube-system], trustDomains: [cluster.local], notTrustDomains: ["*.evil"],
		                           ipBlocks: [10.0.0.0/8], notIpBlocks: [10.1.0.0/16], remoteIpBlocks: ["2001:db8::/32"], notRemoteIpBlocks: [1.2.3.4]}}],
		          to: [{operation: {hosts: ["*.example.com"], notHosts: [admin.example.com], methods: [GET], notMethods: [DELETE],
		                            paths: ["/api/{*}/items/{**}", "*.js"], notPaths: ["/internal/*"], ports: ["8080"], notPorts: ["9000"]}}],
		          when: [{key: "request.headers[x-user]", values: [alice]}, {key: source.ip, notValues: [10.0.0.1]}, {key: destination.port, values: ["8080"]},
		                 {key: connection.sni, values: ["*.app"]}, {key: "experimental.envoy.filters.network.mysql_proxy[db.table]", values: ["[update]"]}]}]}`,
	},
	"custom-audit-and-failures": {
		`{action: CUSTOM, provider: {name: ext}, rules: [{}]}`,
		`{action: AUDIT, rules: [{to: [{operation: {paths: [/audited]}}]}]}`,
		`{action: DENY, rules: [{from: [{source: {requestPrincipals: ["*"]}}], to: [{operation: {ports: ["http", "8080"]}}]}]}`,
		`{rules: [{when: [{key: "request.auth.claims[iss]", values: [x]}]}, {to: [{operation: {ports: ["8080"]}}]}]}`,
	},
}

func TestGolden(t *testing.T) {
	for name, specs := range goldenScenarios {
		t.Run(name, func(t *testing.T) {
			policies := parse(t, specs...)
			out := map[string]any{}
			for _, dp := range []struct {
				key    string
				flavor Flavor
				tcp    bool
			}{{"envoyHTTP", Envoy, false}, {"envoyTCP", Envoy, true}, {"grpc", GRPC, false}} {
				opts := Options{TrustDomain: td, Flavor: dp.flavor}
				var msgs []proto.Message
				if dp.tcp {
					fs, err := NetworkFilters(policies, opts)
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range fs {
						msgs = append(msgs, f)
					}
				} else {
					fs, err := HTTPFilters(policies, opts)
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range fs {
						msgs = append(msgs, f)
					}
				}
				var filters []any
				for _, m := range msgs {
					filters = append(filters, jsonOf(t, m))
				}
				out[dp.key] = filters
				var problems []string
				for _, p := range Check(policies, opts) {
					problems = append(problems, p.String())
				}
				out[dp.key+"Problems"] = problems
			}
			got, err := json.MarshalIndent(out, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale (run with -update); got\n%s", path, got)
			}
		})
	}
}

// TestNoStaleGoldens: every golden file has its scenario.
func TestNoStaleGoldens(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if _, ok := goldenScenarios[name]; !ok {
			t.Errorf("%s has no scenario", f)
		}
	}
	if len(files) != len(goldenScenarios) && !*update {
		var names []string
		for n := range goldenScenarios {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Errorf("%d golden files for scenarios %v", len(files), names)
	}
}

// jsonOf is m in JSON with sorted keys and stable spacing.
func jsonOf(t *testing.T, m proto.Message) any {
	t.Helper()
	js, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
