package validate

import (
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	admissionv1 "k8s.io/api/admission/v1"
)

type specCase struct {
	kind gvk
	spec string
	// refused is a substring of the refusal; empty means allowed.
	refused string
}

func runSpecCases(t *testing.T, cases map[string]specCase, opts ...Option) {
	t.Helper()
	h := NewHandler(testLogger(t), opts...)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, tc.kind, admissionv1.Create, objectJSON(tc.kind, tc.spec)))
			msg := ""
			if out.Response.Result != nil {
				msg = out.Response.Result.Message
			}
			switch {
			case tc.refused == "" && !out.Response.Allowed:
				t.Fatalf("refused: %s", msg)
			case tc.refused != "" && out.Response.Allowed:
				t.Fatalf("allowed, want refused with %q", tc.refused)
			case tc.refused != "" && !strings.Contains(msg, tc.refused):
				t.Fatalf("refused with %q, want it to contain %q", msg, tc.refused)
			}
		})
	}
}

func TestPeerAuthentication(t *testing.T) {
	runSpecCases(t, map[string]specCase{
		"a namespace-wide STRICT policy is allowed": {
			kind: peerAuthn, spec: `{"mtls":{"mode":"STRICT"}}`,
		},
		"an empty spec is allowed": {kind: peerAuthn, spec: `{}`},
		"port-level mTLS with a selector is allowed": {
			kind: peerAuthn,
			spec: `{"selector":{"matchLabels":{"app":"web"}},"mtls":{"mode":"STRICT"},"portLevelMtls":{"8080":{"mode":"DISABLE"}}}`,
		},
		"port-level mTLS without a selector is refused": {
			kind: peerAuthn, spec: `{"portLevelMtls":{"8080":{"mode":"DISABLE"}}}`,
			refused: "spec.portLevelMtls: requires a selector",
		},
		"port-level mTLS with an empty selector is refused": {
			kind: peerAuthn, spec: `{"selector":{},"portLevelMtls":{"8080":{"mode":"DISABLE"}}}`,
			refused: "spec.portLevelMtls: requires a selector",
		},
		"port 0 is refused": {
			kind: peerAuthn, spec: `{"selector":{"matchLabels":{"app":"web"}},"portLevelMtls":{"0":{"mode":"DISABLE"}}}`,
			refused: "spec.portLevelMtls[0]: port 0 is not in 1-65535",
		},
		"port 65536 is refused": {
			kind: peerAuthn, spec: `{"selector":{"matchLabels":{"app":"web"}},"portLevelMtls":{"65536":{"mode":"DISABLE"}}}`,
			refused: "spec.portLevelMtls[65536]",
		},
		"an unknown mode name is refused": {
			kind: peerAuthn, spec: `{"mtls":{"mode":"MAYBE"}}`, refused: "spec:",
		},
		"an undefined mode number is refused": {
			kind: peerAuthn, spec: `{"mtls":{"mode":9}}`, refused: "spec.mtls.mode: 9 is not one of",
		},
		"an unknown field is refused": {
			kind: peerAuthn, spec: `{"mtls":{"mode":"STRICT"},"mTLS":{}}`, refused: "unknown field",
		},
		"an empty selector key is refused": {
			kind: peerAuthn, spec: `{"selector":{"matchLabels":{"":"x"}}}`,
			refused: "spec.selector.matchLabels: empty key",
		},
		"a wildcard selector value is refused": {
			kind: peerAuthn, spec: `{"selector":{"matchLabels":{"app":"*"}}}`,
			refused: "spec.selector.matchLabels[app]",
		},
		"an invalid selector key is refused": {
			kind: peerAuthn, spec: `{"selector":{"matchLabels":{"bad key":"x"}}}`,
			refused: "is not a valid label key",
		},
	})
}

func TestRequestAuthentication(t *testing.T) {
	runSpecCases(t, map[string]specCase{
		"a JWT rule with an https jwksUri is allowed": {
			kind: requestAuthn,
			spec: `{"selector":{"matchLabels":{"app":"web"}},"jwtRules":[{"issuer":"https://issuer.example.com",
				"jwksUri":"https://issuer.example.com/jwks","audiences":["web"],"fromHeaders":[{"name":"x-jwt","prefix":"Bearer "}],
				"outputClaimToHeaders":[{"header":"x-sub","claim":"sub"}],"timeout":"5s"}]}`,
		},
		"a JWT rule with inline jwks is allowed": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwks":"{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"k1\",` +
				`\"x\":\"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU\",\"y\":\"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0\"}]}"}]}`,
		},
		"inline jwks without a usable key is refused, as the generator refuses its tokens": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwks":"{\"keys\":[]}"}]}`,
			refused: "spec.jwtRules[0].jwks: is not a JSON Web Key Set holding a usable public signing key",
		},
		"a rule without an issuer is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"jwksUri":"https://a/jwks"}]}`, refused: "spec.jwtRules[0].issuer: must be set",
		},
		"an http jwksUri is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"http://a/jwks"}]}`,
			refused: "spec.jwtRules[0].jwksUri: \"http://a/jwks\" is not fetched: scheme is not https",
		},
		"a jwksUri without a host is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"https:///jwks"}]}`,
			refused: "must be scheme://host[:port][/path] only",
		},
		"a jwksUri with a query, which istiod would not fetch, is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"https://a/jwks?tenant=x"}]}`,
			refused: "spec.jwtRules[0].jwksUri: \"https://a/jwks?tenant=x\" is not fetched",
		},
		"a jwksUri with port 0 is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"https://a:0/jwks"}]}`,
			refused: "port is not 1-65535",
		},
		"a jwksUri over http to a loopback port is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"http://127.0.0.1:15014/debug/configz"}]}`,
			refused: "spec.jwtRules[0].jwksUri: \"http://127.0.0.1:15014/debug/configz\" is not fetched: " +
				"http to a loopback host is not allowed by this istiod (--allow-loopback-http-jwks)",
		},
		"an issuer over http on a loopback port, without jwks or jwksUri, is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"http://localhost:15014/debug"}]}`,
			refused: "spec.jwtRules[0].issuer: \"http://localhost:15014/debug\": without jwks or jwksUri, the key set is found by " +
				"the issuer's discovery document, which is not fetched: http to a loopback host is not allowed",
		},
		"an issuer that is not a URL, without jwks or jwksUri, is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"testing@secure.istio.io"}]}`,
			refused: "spec.jwtRules[0].issuer: \"testing@secure.istio.io\": without jwks or jwksUri",
		},
		"an https issuer without jwks or jwksUri is allowed": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"https://issuer.example.com/realms/x"}]}`,
		},
		"an issuer over http on a loopback port with an https jwksUri is allowed": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"http://127.0.0.1:8080","jwksUri":"https://a/jwks"}]}`,
		},
		"jwks and jwksUri together are refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"https://a/jwks","jwks":"{\"keys\":[]}"}]}`,
			refused: "set jwks or jwksUri, not both",
		},
		"jwks that is not a key set is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwks":"not json"}]}`,
			refused: "spec.jwtRules[0].jwks",
		},
		"an empty audience is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","audiences":["a",""]}]}`,
			refused: "spec.jwtRules[0].audiences[1]: must not be empty",
		},
		"an empty header name is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","fromHeaders":[{"prefix":"Bearer "}]}]}`,
			refused: "spec.jwtRules[0].fromHeaders[0].name: must not be empty",
		},
		"an invalid output header is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","outputClaimToHeaders":[{"header":"x sub","claim":"sub"}]}]}`,
			refused: "outputClaimToHeaders[0].header",
		},
		"a sub-millisecond timeout is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","timeout":"0.0001s"}]}`,
			refused: "spec.jwtRules[0].timeout: duration must be at least 1ms",
		},
		"a null rule is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[null]}`, refused: "spec",
		},
	})
}

// TestRequestAuthenticationLoopbackHTTPAllowed: where istiod's operator
// lets it fetch key sets over plain http from loopback hosts, the webhook
// admits such rules; everything else is as without.
func TestRequestAuthenticationLoopbackHTTPAllowed(t *testing.T) {
	runSpecCases(t, map[string]specCase{
		"a jwksUri over http to a loopback port is allowed": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"http://127.0.0.1:8080/keys"}]}`,
		},
		"an issuer over http on a loopback port, without jwks or jwksUri, is allowed": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"http://localhost:8080"}]}`,
		},
		"an http jwksUri elsewhere is refused": {
			kind: requestAuthn, spec: `{"jwtRules":[{"issuer":"i","jwksUri":"http://a/jwks"}]}`,
			refused: "http is allowed only for loopback hosts",
		},
	}, AllowLoopbackHTTPJWKS(true))
}

func TestDestinationRule(t *testing.T) {
	runSpecCases(t, map[string]specCase{
		"ISTIO_MUTUAL with a port-level override is allowed": {
			kind: destRule,
			spec: `{"host":"reviews.default.svc.cluster.local","trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"},
				"portLevelSettings":[{"port":{"number":9080},"tls":{"mode":"DISABLE"}}]},
				"subsets":[{"name":"v1","labels":{"version":"v1"}}]}`,
		},
		"SIMPLE with a credentialName in a rule selecting its workloads is allowed": {
			kind: destRule, spec: `{"host":"*.example.com","workloadSelector":{"matchLabels":{"app":"a"}},
				"trafficPolicy":{"tls":{"mode":"SIMPLE","credentialName":"ca"}}}`,
		},
		"SIMPLE with a credentialName in a rule for every client is refused, as the generators refuse it": {
			kind: destRule, spec: `{"host":"*.example.com","trafficPolicy":{"tls":{"mode":"SIMPLE","credentialName":"ca"}}}`,
			refused: "spec.trafficPolicy.tls: refused by this istiod, whose clusters for it would get no endpoints: credentialName applies to a sidecar only in a rule with a workloadSelector",
		},
		"insecureSkipVerify is refused where istiod does not allow it": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"portLevelSettings":[{"port":{"number":443},"tls":{"mode":"SIMPLE","insecureSkipVerify":true}}]}}`,
			refused: "spec.trafficPolicy.portLevelSettings[0].tls: refused by this istiod, whose clusters for it would get no endpoints: insecureSkipVerify is not allowed",
		},
		"MUTUAL with files is allowed": {
			kind: destRule,
			spec: `{"host":"db","trafficPolicy":{"tls":{"mode":"MUTUAL","clientCertificate":"/c.pem","privateKey":"/k.pem"}}}`,
		},
		"a host with a partial wildcard label is allowed": {
			kind: destRule, spec: `{"host":"*-api.example.com","trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"}}}`,
		},
		"a host with a wildcard after the first label is refused": {
			kind: destRule, spec: `{"host":"api.*.example.com"}`, refused: "spec.host",
		},
		"a missing host is refused": {
			kind: destRule, spec: `{"trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"}}}`, refused: "spec.host: must not be empty",
		},
		"an invalid host is refused": {
			kind: destRule, spec: `{"host":"bad_host!"}`, refused: "spec.host",
		},
		"an unknown tls mode is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"STRICT"}}}`, refused: "spec:",
		},
		"an undefined tls mode number is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tls":{"mode":12}}}`,
			refused: "spec.trafficPolicy.tls.mode: 12 is not one of",
		},
		"credentialName with ISTIO_MUTUAL is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL","credentialName":"c"}}}`,
			refused: "spec.trafficPolicy.tls.credentialName: may only be set with mode SIMPLE or MUTUAL",
		},
		"credentialName with a client certificate is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"MUTUAL","credentialName":"c","clientCertificate":"/c.pem"}}}`,
			refused: "spec.trafficPolicy.tls.credentialName: cannot be set with clientCertificate",
		},
		"MUTUAL without certificates is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"MUTUAL"}}}`,
			refused: "spec.trafficPolicy.tls.clientCertificate: must be set",
		},
		"insecureSkipVerify with caCertificates is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"SIMPLE","caCertificates":"/ca.pem","insecureSkipVerify":true}}}`,
			refused: "spec.trafficPolicy.tls.insecureSkipVerify",
		},
		"a port-level setting without a port is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"portLevelSettings":[{"tls":{"mode":"DISABLE"}}]}}`,
			refused: "spec.trafficPolicy.portLevelSettings[0].port: must be set",
		},
		"a port-level setting on port 0 is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"portLevelSettings":[{"port":{"number":0},"tls":{"mode":"DISABLE"}}]}}`,
			refused: "spec.trafficPolicy.portLevelSettings[0].port.number: port 0",
		},
		"a port-level setting with only a port is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"portLevelSettings":[{"port":{"number":80}}]}}`,
			refused: "must set at least one field besides port",
		},
		"an empty traffic policy is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{}}`, refused: "spec.trafficPolicy: must set at least one field",
		},
		"a subset credentialName with DISABLE is refused": {
			kind: destRule, spec: `{"host":"a","subsets":[{"name":"v1","trafficPolicy":{"tls":{"mode":"DISABLE","credentialName":"c"}}}]}`,
			refused: "spec.subsets[0].trafficPolicy.tls.credentialName",
		},
		"duplicate subset names are refused": {
			kind: destRule, spec: `{"host":"a","subsets":[{"name":"v1"},{"name":"v1"}]}`,
			refused: "spec.subsets[1].name",
		},
		"an unknown field in the traffic policy is refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tlsMode":"SIMPLE"}}`, refused: "unknown field",
		},
		"exportTo of '.', namespaces or '*' is allowed": {
			kind: destRule, spec: `{"host":"a","exportTo":[".","other"]}`,
		},
		"exportTo '*' is allowed alone": {kind: destRule, spec: `{"host":"a","exportTo":["*"]}`},
		"exportTo '*' with another entry is refused": {
			kind: destRule, spec: `{"host":"a","exportTo":["*","other"]}`, refused: `spec.exportTo: "*" must be the only entry`,
		},
		"exportTo '~' is refused for a DestinationRule": {
			kind: destRule, spec: `{"host":"a","exportTo":["~"]}`, refused: "spec.exportTo[0]",
		},
		"an empty exportTo entry is refused": {
			kind: destRule, spec: `{"host":"a","exportTo":[""]}`, refused: "spec.exportTo[0]",
		},
		"exportTo '.' and the rule's own namespace is refused": {
			kind: destRule, spec: `{"host":"a","exportTo":[".","ns"]}`, refused: "spec.exportTo[1]",
		},
		"a repeated exportTo entry is refused": {
			kind: destRule, spec: `{"host":"a","exportTo":["b","b"]}`, refused: "spec.exportTo[1]",
		},
		"a workload-selected rule exported to its namespace is allowed": {
			kind: destRule, spec: `{"host":"a","workloadSelector":{"matchLabels":{"app":"a"}},"exportTo":["."]}`,
		},
		"a workload-selected rule exported elsewhere is refused": {
			kind: destRule, spec: `{"host":"a","workloadSelector":{"matchLabels":{"app":"a"}},"exportTo":["*"]}`,
			refused: "spec.exportTo: a rule with a workloadSelector",
		},
	})
}

func TestOperationsAndKindsOutsideScopeAreAllowed(t *testing.T) {
	h := NewHandler(testLogger(t))
	invalid := objectJSON(authzPolicy, `{"action":"DENY"}`)
	for name, tc := range map[string]struct {
		k  gvk
		op admissionv1.Operation
	}{
		"a DELETE of an invalid policy":        {authzPolicy, admissionv1.Delete},
		"a CONNECT":                            {authzPolicy, admissionv1.Connect},
		"a v1alpha1 security kind":             {gvk{"security.istio.io", "v1alpha1", "AuthorizationPolicy"}, admissionv1.Create},
		"a kind of another group":              {gvk{"example.com", "v1", "AuthorizationPolicy"}, admissionv1.Create},
		"a WorkloadGroup":                      {gvk{"networking.istio.io", "v1", "WorkloadGroup"}, admissionv1.Create},
		"a DestinationRule in the wrong group": {gvk{"security.istio.io", "v1", "DestinationRule"}, admissionv1.Create},
	} {
		t.Run(name, func(t *testing.T) {
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, tc.k, tc.op, invalid))
			if !out.Response.Allowed {
				t.Fatalf("refused: %+v", out.Response.Result)
			}
		})
	}
}

func TestStatusWritesAreAllowed(t *testing.T) {
	body := reviewFor(t, admission.APIVersionV1, authzPolicy, admissionv1.Update, objectJSON(authzPolicy, `{"action":"DENY"}`))
	body = []byte(strings.Replace(string(body), `"operation":"UPDATE"`, `"operation":"UPDATE","subResource":"status"`, 1))
	out := admitBody(t, NewHandler(testLogger(t)), body)
	if !out.Response.Allowed {
		t.Fatalf("status write refused: %+v", out.Response.Result)
	}
}

func TestVersionsAreValidated(t *testing.T) {
	h := NewHandler(testLogger(t))
	for name, k := range map[string]gvk{
		"security v1beta1":    {"security.istio.io", "v1beta1", "AuthorizationPolicy"},
		"networking v1beta1":  {"networking.istio.io", "v1beta1", "DestinationRule"},
		"networking v1alpha3": {"networking.istio.io", "v1alpha3", "DestinationRule"},
		"security v1":         {"security.istio.io", "v1", "RequestAuthentication"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := `{"action":"DENY"}`
			switch k.kind {
			case "DestinationRule":
				spec = `{}`
			case "RequestAuthentication":
				spec = `{"jwtRules":[{}]}`
			}
			out := admitBody(t, h, reviewFor(t, admission.APIVersionV1beta1, k, admissionv1.Update, objectJSON(k, spec)))
			if out.Response.Allowed {
				t.Fatal("invalid object allowed")
			}
			if out.APIVersion != admission.APIVersionV1beta1 || out.Response.UID != "uid-1" {
				t.Errorf("apiVersion %q uid %q not echoed", out.APIVersion, out.Response.UID)
			}
		})
	}
}

func TestRefusalIsBounded(t *testing.T) {
	principals := strings.Repeat(`"",`, 200) + `""`
	out := admitBody(t, NewHandler(testLogger(t)), reviewFor(t, admission.APIVersionV1, authzPolicy, admissionv1.Create,
		objectJSON(authzPolicy, `{"rules":[{"from":[{"source":{"principals":[`+principals+`]}}]}]}`)))
	msg := out.Response.Result.Message
	if out.Response.Allowed || !strings.Contains(msg, "and 191 more") {
		t.Fatalf("message %q, want the first %d problems and a count", msg, maxProblems)
	}
}

// Where istiod runs with --allow-insecure-skip-verify, the generators
// apply such a rule, and the webhook admits it with a warning.
func TestInsecureSkipVerifyWhereIstiodAllowsIt(t *testing.T) {
	spec := `{"host":"a","trafficPolicy":{"tls":{"mode":"SIMPLE","insecureSkipVerify":true}}}`
	h := NewHandler(testLogger(t), AllowInsecureSkipVerify(true))
	out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, destRule, admissionv1.Create, objectJSON(destRule, spec)))
	if !out.Response.Allowed {
		t.Fatalf("refused: %v", out.Response.Result)
	}
	if !strings.Contains(strings.Join(out.Response.Warnings, "\n"), "spec.trafficPolicy.tls.insecureSkipVerify: the server is not verified") {
		t.Errorf("warnings %q", out.Response.Warnings)
	}
	runSpecCases(t, map[string]specCase{
		"what Istio's validation refuses stays refused": {
			kind: destRule, spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"SIMPLE","caCertificates":"/ca.pem","insecureSkipVerify":true}}}`,
			refused: "spec.trafficPolicy.tls.insecureSkipVerify: cannot be true",
		},
	}, AllowInsecureSkipVerify(true))
}
