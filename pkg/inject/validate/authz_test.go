package validate

import (
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	admissionv1 "k8s.io/api/admission/v1"
)

func TestAuthorizationPolicy(t *testing.T) {
	runSpecCases(t, map[string]specCase{
		"an ALLOW policy with principals, ports and paths is allowed": {
			kind: authzPolicy,
			spec: `{"selector":{"matchLabels":{"app":"web"}},"action":"ALLOW","rules":[{
				"from":[{"source":{"principals":["cluster.local/ns/default/sa/client","*/ns/prod/sa/api","cluster.local/ns/ops/*","*"]}}],
				"to":[{"operation":{"ports":["8080"],"methods":["GET","POST"],"paths":["/api/*","/v1/{*}/items/{**}"]}}],
				"when":[{"key":"request.headers[x-tenant]","values":["a"]},{"key":"source.ip","notValues":["10.0.0.0/8"]}]}]}`,
		},
		"an empty ALLOW policy (deny all) is allowed": {kind: authzPolicy, spec: `{}`},
		"a DENY policy with an empty rule (matches everything) is allowed": {
			kind: authzPolicy, spec: `{"action":"DENY","rules":[{}]}`,
		},
		"a DENY policy without rules is refused": {
			kind: authzPolicy, spec: `{"action":"DENY"}`, refused: "spec.rules: a DENY policy without rules never applies",
		},
		"an AUDIT policy is allowed": {
			kind: authzPolicy, spec: `{"action":"AUDIT","rules":[{"to":[{"operation":{"paths":["/admin"]}}]}]}`,
		},
		"a CUSTOM policy with a provider is allowed": {
			kind: authzPolicy, spec: `{"action":"CUSTOM","provider":{"name":"ext-authz"},"rules":[{"to":[{"operation":{"paths":["/x"]}}]}]}`,
		},
		"a CUSTOM policy without a provider is refused": {
			kind: authzPolicy, spec: `{"action":"CUSTOM","rules":[{}]}`, refused: "spec.provider.name: must be set",
		},
		"a provider on an ALLOW policy is refused": {
			kind: authzPolicy, spec: `{"action":"ALLOW","provider":{"name":"x"},"rules":[{}]}`,
			refused: "spec.provider: may only be set with action CUSTOM",
		},
		"a CUSTOM policy matching principals is refused": {
			kind:    authzPolicy,
			spec:    `{"action":"CUSTOM","provider":{"name":"x"},"rules":[{"from":[{"source":{"principals":["cluster.local/ns/a/sa/b"]}}]}]}`,
			refused: "spec.rules[0].from[0].source.principals: cannot be used with action CUSTOM",
		},
		"a CUSTOM policy matching a request.auth claim is refused": {
			kind:    authzPolicy,
			spec:    `{"action":"CUSTOM","provider":{"name":"x"},"rules":[{"when":[{"key":"request.auth.claims[iss]","values":["a"]}]}]}`,
			refused: "cannot be used with action CUSTOM",
		},
		"an unknown action is refused": {
			kind: authzPolicy, spec: `{"action":"LOG"}`, refused: "spec:",
		},
		"an undefined action number is refused": {
			kind: authzPolicy, spec: `{"action":7}`, refused: "spec.action: 7 is not one of",
		},
		"an empty principal is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"principals":["cluster.local/ns/a/sa/b",""]}}]}]}`,
			refused: "spec.rules[0].from[0].source.principals[1]: must not be empty",
		},
		"a principal without the ns/sa shape is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"principals":["cluster.local/default/client"]}}]}]}`,
			refused: "spec.rules[0].from[0].source.principals[0]",
		},
		"a principal with a wildcard inside a segment is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"notPrincipals":["cluster.local/ns/a/sa/app-*"]}}]}]}`,
			refused: "spec.rules[0].from[0].source.notPrincipals[0]",
		},
		"a principal with wildcards at both ends is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"principals":["*/ns/a/*"]}}]}]}`,
			refused: "source.principals[0]",
		},
		"a spiffe URI principal is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"principals":["spiffe://cluster.local/ns/a/sa/b"]}}]}]}`,
			refused: "source.principals[0]",
		},
		"an empty from list is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[]}]}`, refused: "spec.rules[0].from: must not be an empty list",
		},
		"an empty to list is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[]}]}`, refused: "spec.rules[0].to: must not be an empty list",
		},
		"a from entry without a source is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{}]}]}`, refused: "spec.rules[0].from[0].source: must be set",
		},
		"an empty source is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{}}]}]}`, refused: "spec.rules[0].from[0].source: must not be empty",
		},
		"an empty operation is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[{"operation":{}}]}]}`, refused: "spec.rules[0].to[0].operation: must not be empty",
		},
		"a port that is not a number is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[{"operation":{"ports":["http"]}}]}]}`,
			refused: "spec.rules[0].to[0].operation.ports[0]",
		},
		"port 0 in an operation is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[{"operation":{"notPorts":["0"]}}]}]}`,
			refused: "operation.notPorts[0]",
		},
		"a method with a space is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[{"operation":{"methods":["GET POST"]}}]}]}`,
			refused: "operation.methods[0]",
		},
		"an empty path is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[{"operation":{"paths":[""]}}]}]}`,
			refused: "operation.paths[0]: must not be empty",
		},
		"a path template with {**} before {*} is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[{"operation":{"paths":["/a/{**}/{*}"]}}]}]}`,
			refused: "must be the last template operator",
		},
		"a path template with a named variable is refused": {
			kind: authzPolicy, spec: `{"rules":[{"to":[{"operation":{"paths":["/a/{*}/{name}"]}}]}]}`,
			refused: "operation.paths[0]",
		},
		"an empty namespace is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"namespaces":[""]}}]}]}`,
			refused: "source.namespaces[0]: must not be empty",
		},
		"a bad IP block is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"ipBlocks":["10.0.0.0/33"]}}]}]}`,
			refused: "source.ipBlocks[0]",
		},
		"a service account with a wildcard is refused": {
			kind: authzPolicy, spec: `{"rules":[{"from":[{"source":{"serviceAccounts":["ns/*"]}}]}]}`,
			refused: "source.serviceAccounts[0]",
		},
		"an unknown when key is refused": {
			kind: authzPolicy, spec: `{"rules":[{"when":[{"key":"source.color","values":["red"]}]}]}`,
			refused: "spec.rules[0].when[0].key: \"source.color\" is not a supported attribute",
		},
		"a replaced when key is refused with the reason": {
			kind: authzPolicy, spec: `{"rules":[{"when":[{"key":"destination.labels[app]","values":["a"]}]}]}`,
			refused: "is replaced by the workload selector",
		},
		"a map when key without a name is refused": {
			kind: authzPolicy, spec: `{"rules":[{"when":[{"key":"request.headers[]","values":["a"]}]}]}`,
			refused: "must have the form request.headers[<name>]",
		},
		"a when condition without values is refused": {
			kind: authzPolicy, spec: `{"rules":[{"when":[{"key":"source.namespace"}]}]}`,
			refused: "at least one of values and notValues",
		},
		"a destination.port condition out of range is refused": {
			kind: authzPolicy, spec: `{"rules":[{"when":[{"key":"destination.port","values":["70000"]}]}]}`,
			refused: "spec.rules[0].when[0].values[0]",
		},
		"an experimental envoy filter key is allowed": {
			kind: authzPolicy, spec: `{"rules":[{"when":[{"key":"experimental.envoy.filters.network.mysql_proxy[db.table]","values":["[update]"]}]}]}`,
		},
		"selector and targetRef together are refused": {
			kind:    authzPolicy,
			spec:    `{"selector":{"matchLabels":{"app":"a"}},"targetRef":{"kind":"Gateway","group":"gateway.networking.k8s.io","name":"gw"}}`,
			refused: "only one of selector, targetRef and targetRefs",
		},
		"a targetRef to a Deployment is refused": {
			kind: authzPolicy, spec: `{"targetRef":{"kind":"Deployment","group":"apps","name":"web"}}`,
			refused: "spec.targetRef: kind \"Deployment\"",
		},
	})
}

func TestAuthorizationPolicyDryRunAnnotation(t *testing.T) {
	h := NewHandler(testLogger(t))
	for name, tc := range map[string]struct {
		value, action string
		allowed       bool
	}{
		"a boolean on an ALLOW policy is allowed": {"true", "ALLOW", true},
		"a non-boolean is refused":                {"yes please", "DENY", false},
		"a CUSTOM policy cannot be dry-run":       {"true", "CUSTOM", false},
	} {
		t.Run(name, func(t *testing.T) {
			obj := `{"metadata":{"name":"p","namespace":"ns","annotations":{"istio.io/dry-run":"` + tc.value +
				`"}},"spec":{"action":"` + tc.action + `","provider":{"name":"x"},"rules":[{}]}}`
			if tc.action != "CUSTOM" {
				obj = strings.Replace(obj, `"provider":{"name":"x"},`, "", 1)
			}
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, authzPolicy, admissionv1.Create, []byte(obj)))
			if out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", out.Response.Allowed, tc.allowed, out.Response.Result)
			}
		})
	}
}
