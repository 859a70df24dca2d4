package validate

import (
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
)

var (
	gateway        = gvk{"networking.istio.io", "v1", "Gateway"}
	virtualService = gvk{"networking.istio.io", "v1", "VirtualService"}
)

// The rules themselves are package policy's, tested there and against
// Istio's validator in test/interop; these cases check that the webhook
// asks them for every served version and reports what they find.
func TestGatewayAndVirtualService(t *testing.T) {
	hosts := make([]string, 10000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf(`"h%d.example.com"`, i)
	}
	runSpecCases(t, map[string]specCase{
		"an HTTPS gateway with a credentialName is allowed": {
			kind: gateway,
			spec: `{"selector":{"istio":"ingressgateway"},"servers":[{"port":{"number":443,"name":"https","protocol":"HTTPS"},"hosts":["*/a.example.com"],"tls":{"mode":"SIMPLE","credentialName":"a-cert"}}]}`,
		},
		"an HTTPS server without TLS settings is refused": {
			kind:    gateway,
			spec:    `{"servers":[{"port":{"number":443,"name":"https","protocol":"HTTPS"},"hosts":["a.example.com"]}]}`,
			refused: "spec.servers[0].tls: an HTTPS server needs TLS settings",
		},
		"a gateway without servers is refused": {
			kind: gateway, spec: `{}`, refused: "spec.servers: a Gateway needs at least one server",
		},
		"an unknown gateway field is refused": {
			kind: gateway, spec: `{"servers":[],"selectr":{}}`, refused: "unknown field",
		},
		"a routed VirtualService is allowed": {
			kind: virtualService,
			spec: `{"hosts":["a.example.com"],"gateways":["istio-system/ingress"],"http":[{"match":[{"uri":{"regex":"/v[0-9]+/.*"}}],"route":[{"destination":{"host":"a.ns.svc.cluster.local"}}]}]}`,
		},
		"a regex Envoy would refuse is refused": {
			kind:    virtualService,
			spec:    `{"hosts":["a.example.com"],"http":[{"match":[{"uri":{"regex":"` + strings.Repeat(`([a-z]{1000})`, 34) + `"}}],"route":[{"destination":{"host":"a"}}]}]}`,
			refused: "spec.http[0].match[0].uri: regex",
		},
		"10,000 hosts are refused": {
			kind:    virtualService,
			spec:    `{"hosts":[` + strings.Join(hosts, ",") + `],"http":[{"route":[{"destination":{"host":"a"}}]}]}`,
			refused: "spec.hosts: 10000 hosts, more than 1024",
		},
		"a VirtualService without routes is refused": {
			kind: virtualService, spec: `{"hosts":["a.example.com"]}`, refused: "spec: one of http, tcp or tls must be set",
		},
	})
}

func TestGatewayVersionsAreValidated(t *testing.T) {
	h := NewHandler(testLogger(t))
	for _, v := range []string{"v1", "v1beta1", "v1alpha3"} {
		for _, k := range []gvk{{"networking.istio.io", v, "Gateway"}, {"networking.istio.io", v, "VirtualService"}} {
			t.Run(k.kind+" "+v, func(t *testing.T) {
				out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, k, admissionv1.Create, objectJSON(k, `{}`)))
				if out.Response.Allowed {
					t.Fatal("an empty spec was allowed")
				}
			})
		}
	}
}

// TestIstioWarningsAreAdmissionWarnings: what Istio's validation warns
// about comes back as admission warnings naming the object, before what
// Bulwark ignores of it.
func TestIstioWarningsAreAdmissionWarnings(t *testing.T) {
	h := NewHandler(testLogger(t))
	spec := `{"servers":[{"port":{"number":443,"name":"https","protocol":"HTTPS"},"hosts":["a.example.com"],"defaultEndpoint":"127.0.0.1:8080",` +
		`"tls":{"mode":"SIMPLE","credentialName":"c","cipherSuites":["NOT-A-SUITE"],"httpsRedirect":true}}]}`
	out := admitBody(t, h, reviewFor(t, admission.APIVersionV1, gateway, admissionv1.Create, objectJSON(gateway, spec)))
	if !out.Response.Allowed {
		t.Fatalf("refused: %+v", out.Response.Result)
	}
	want := []string{
		"Gateway ns/p: spec.servers[0].tls.cipherSuites: unknown suites ignored: NOT-A-SUITE",
		"Gateway ns/p: spec.servers[0].tls.httpsRedirect: only has an effect on HTTP servers",
		"Gateway ns/p is not honoured as written: spec.servers[0].defaultEndpoint: ignored, not generated",
	}
	if strings.Join(out.Response.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(out.Response.Warnings, "\n"), strings.Join(want, "\n"))
	}
}
