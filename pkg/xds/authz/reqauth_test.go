package authz

import "testing"

// jwt is the dynamic metadata jwt_authn leaves for a verified token.
func jwt(payload map[string]any) map[string]map[string]any {
	return map[string]map[string]any{JWTFilterName: {JWTPayloadKey: payload}}
}

func TestRequestAuthentication(t *testing.T) {
	alice := jwt(map[string]any{"iss": "https://idp.example.com", "sub": "alice", "aud": []any{"web", "api"}, "azp": "spa",
		"groups": []any{"dev", "admin"}, "kubernetes.io": map[string]any{"namespace": "app", "pod": map[string]any{"name": "p-1"}},
		"scope": []string{"read", "write"}, "level": 3.0})
	bob := jwt(map[string]any{"iss": "https://other.example.com", "sub": "bob", "aud": "web", "groups": "dev"})
	noToken := req{}
	run(t, map[string]testCase{
		"requestPrincipals: issuer and subject, split at the last slash": {
			specs: []string{`{rules: [{from: [{source: {requestPrincipals: ["https://idp.example.com/alice"]}}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}}, deny: []req{noToken, {Metadata: bob}}},
			tcp:   &check{deny: []req{noToken}},
		},
		"requestPrincipals: any token": {
			specs: []string{`{rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}, {Metadata: bob}}, deny: []req{noToken}},
		},
		"requestPrincipals: wildcards on issuer or subject": {
			specs: []string{`{rules: [{from: [{source: {requestPrincipals: ["*/bob", "https://idp.example.com/*", "https://other*"]}}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}, {Metadata: bob}}, deny: []req{noToken, {Metadata: jwt(map[string]any{"iss": "x", "sub": "carol"})}}},
		},
		"requestPrincipals: a suffix of the subject without an issuer": {
			specs: []string{`{rules: [{from: [{source: {requestPrincipals: ["*ice"]}}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}}, deny: []req{{Metadata: bob}, noToken}},
		},
		"notRequestPrincipals * in a DENY requires a token": {
			specs: []string{`{action: DENY, rules: [{from: [{source: {notRequestPrincipals: ["*"]}}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}, {Metadata: bob}}, deny: []req{noToken}},
		},
		"requestPrincipals in a DENY do not deny a request without a token (as Istio)": {
			specs: []string{`{action: DENY, rules: [{from: [{source: {requestPrincipals: ["https://other.example.com/bob"]}}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}, noToken}, deny: []req{{Metadata: bob}}},
			// HTTP only: a DENY keeps its other fields on TCP, here none.
			tcp: &check{deny: []req{noToken}},
		},
		"audiences and presenter match a string or a list member": {
			specs: []string{`{rules: [{when: [{key: request.auth.audiences, values: [api]}]}, {when: [{key: request.auth.presenter, values: ["sp*"]}, {key: request.auth.audiences, values: [web]}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}}, deny: []req{{Metadata: bob}, noToken}},
		},
		"claims: a list member, a nested claim, a dotted name": {
			specs: []string{`{rules: [{when: [{key: "request.auth.claims[groups]", values: [admin]}, {key: "request.auth.claims[kubernetes.io][pod][name]", values: ["p-*"]}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}}, deny: []req{{Metadata: bob}, noToken,
				{Metadata: jwt(map[string]any{"groups": []any{"admin"}, "kubernetes.io": map[string]any{"pod": "p-1"}})}}},
		},
		"claims: notValues deny a token whose claim matches": {
			specs: []string{`{action: DENY, rules: [{when: [{key: "request.auth.claims[groups]", values: [dev]}, {key: "request.auth.claims[scope]", notValues: [write]}]}]}`},
			envoy: &check{allow: []req{{Metadata: alice}, noToken}, deny: []req{{Metadata: bob}}},
		},
		"claims that are not strings never match a string": {
			specs: []string{`{rules: [{when: [{key: "request.auth.claims[level]", values: ["3", "*"]}]}]}`},
			envoy: &check{deny: []req{{Metadata: alice}, noToken}},
		},
		"an ALLOW on request principals is dropped on TCP": {
			specs: []string{`{rules: [{from: [{source: {requestPrincipals: ["*"]}}]}, {from: [{source: {ipBlocks: [10.0.0.0/8]}}]}]}`},
			tcp:   &check{allow: []req{{Src: "10.0.0.1"}}, deny: []req{{Src: "11.0.0.1"}}},
		},
	})
}

func TestClaimPath(t *testing.T) {
	for key, want := range map[string]string{
		"request.auth.claims[iss]":     "iss",
		"request.auth.claims[a.b]":     "a.b",
		"request.auth.claims[a][b][c]": "a|b|c",
		"request.auth.claims[]":        "",
		"request.auth.claims[a][]":     "",
		"request.auth.claims[a]x":      "",
		"request.auth.claims":          "",
		"request.auth.claims[a[b]]":    "",
		"request.auth.claims[a][b":     "",
		"request.auth.claimsx[a]":      "",
		"request.auth.claims[1][2][3][4][5][6][7][8][9][10][11][12][13][14][15][16][17]": "",
	} {
		got, err := claimPath(key)
		if want == "" {
			if err == nil {
				t.Errorf("%s: %q, want an error", key, got)
			}
			continue
		}
		if err != nil || joinPath(got) != want {
			t.Errorf("%s: %q, %v; want %s", key, got, err, want)
		}
	}
}

func joinPath(p []string) string {
	out := ""
	for i, s := range p {
		if i > 0 {
			out += "|"
		}
		out += s
	}
	return out
}

func TestHTTPFilterGroupsPutCustomFirst(t *testing.T) {
	policies := parse(t, `{action: CUSTOM, provider: {name: x}, rules: [{}]}`, `{action: DENY, rules: [{}]}`, `{rules: [{}]}`)
	custom, rest, err := HTTPFilterGroups(policies, Options{TrustDomain: td, Flavor: Envoy})
	if err != nil || len(custom) != 1 || len(rest) != 2 {
		t.Fatalf("Envoy: %d custom, %d others, %v; want 1, 2", len(custom), len(rest), err)
	}
	all, _ := HTTPFilters(policies, Options{TrustDomain: td, Flavor: Envoy})
	if len(all) != 3 || string(all[0].GetTypedConfig().GetValue()) != string(custom[0].GetTypedConfig().GetValue()) {
		t.Fatalf("HTTPFilters is not the groups in order: %v", all)
	}
	custom, rest, err = HTTPFilterGroups(policies, Options{TrustDomain: td, Flavor: GRPC})
	if err != nil || len(custom) != 0 || len(rest) != 2 {
		t.Fatalf("gRPC: %d custom, %d others, %v; want the refusal inside DENY", len(custom), len(rest), err)
	}
}
