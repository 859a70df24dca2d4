package report

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
	securityv1 "istio.io/api/security/v1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
	"github.com/bulwark-mesh/bulwark/pkg/inject/validate"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/authz"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/reqauthn"
)

var testTD = spiffeid.RequireTrustDomainFromString("cluster.local")

// agreementCase is one object, and whether the webhook and the
// generator (with the problem log that reports what it refuses) both
// refuse it.
type agreementCase struct {
	kind string // AuthorizationPolicy, RequestAuthentication or DestinationRule
	spec string // JSON
	// refused is the verdict both must give.
	refused bool
	// stricter marks an object only the webhook refuses: a form stricter
	// than Istio's (package validate's deliberate differences), which the
	// generator translates as Istio does.
	stricter bool
}

// The validating webhook, the generators and the problem log judge an
// object by one rule: what the webhook admits the generator applies as
// written, and what the generator refuses (failing closed, with a
// problem logged) the webhook refuses at admission.
func TestWebhookAndGeneratorAgree(t *testing.T) {
	cases := map[string]agreementCase{
		"an ALLOW rule of a plain path": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"to":[{"operation":{"paths":["/api/*"]}}]}]}`,
		},
		"a path template without a leading slash": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"to":[{"operation":{"paths":["api/{*}"]}}]}]}`, refused: true,
		},
		"a path template with a literal Envoy does not take": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"to":[{"operation":{"paths":["/a=b/{*}"]}}]}]}`, refused: true,
		},
		"a trust domain with a slash": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"from":[{"source":{"trustDomains":["td/x"]}}]}]}`, refused: true,
		},
		"a trust domain with a wildcard at its start": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"from":[{"source":{"trustDomains":["*.example.org"]}}]}]}`,
		},
		"an IP address with a zone": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"from":[{"source":{"ipBlocks":["fe80::1%eth0"]}}]}]}`, refused: true,
		},
		"a when condition on the source trust domain, as Istio allows": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"when":[{"key":"source.trustDomain","values":["td.example"]}]}]}`,
		},
		"a when key Istio does not know": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"when":[{"key":"request.experimental.inline.headers[x]","values":["a"]}]}]}`, refused: true,
		},
		"a claim name holding a bracket": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"when":[{"key":"request.auth.claims[a[b]","values":["a"]}]}]}`, refused: true,
		},
		"a principal written as a SPIFFE URI, which never matches": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"from":[{"source":{"principals":["spiffe://cluster.local/ns/a/sa/b"]}}]}]}`, stricter: true,
		},
		"a principal": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"from":[{"source":{"principals":["cluster.local/ns/a/sa/b"]}}]}]}`,
		},
		"a destination port of 0, which matches nothing": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"to":[{"operation":{"ports":["0"]}}]}]}`, stricter: true,
		},
		"a destination port that is not a number": {
			kind: "AuthorizationPolicy", spec: `{"rules":[{"to":[{"operation":{"ports":["http"]}}]}]}`, refused: true,
		},
		"a key set of no keys": {
			kind: "RequestAuthentication", spec: `{"jwtRules":[{"issuer":"https://issuer.example","jwks":"{\"keys\":[]}"}]}`, refused: true,
		},
		"a jwksUri over https": {
			kind: "RequestAuthentication", spec: `{"jwtRules":[{"issuer":"https://issuer.example","jwksUri":"https://issuer.example/keys"}]}`,
		},
		"a jwksUri over http to istiod's own loopback port": {
			kind: "RequestAuthentication", spec: `{"jwtRules":[{"issuer":"https://issuer.example","jwksUri":"http://127.0.0.1:15014/keys"}]}`, refused: true,
		},
		"SIMPLE TLS with a CA file": {
			kind: "DestinationRule", spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"SIMPLE","caCertificates":"/ca.pem"}}}`,
		},
		"a CA file whose path holds the SDS separator": {
			kind: "DestinationRule", spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"SIMPLE","caCertificates":"/ca~x.pem"}}}`, refused: true,
		},
		"a credentialName naming another namespace's Secret": {
			kind: "DestinationRule", spec: `{"host":"a","workloadSelector":{"matchLabels":{"app":"a"}},
				"trafficPolicy":{"tls":{"mode":"SIMPLE","credentialName":"other/ca"}}}`, refused: true,
		},
		"a credentialName in a rule that selects its workloads": {
			kind: "DestinationRule", spec: `{"host":"a","workloadSelector":{"matchLabels":{"app":"a"}},
				"trafficPolicy":{"tls":{"mode":"SIMPLE","credentialName":"ca"}}}`,
		},
		"a credentialName in a rule for every client": {
			kind: "DestinationRule", spec: `{"host":"a","trafficPolicy":{"tls":{"mode":"SIMPLE","credentialName":"ca"}}}`, refused: true,
		},
		"a subset's insecureSkipVerify where istiod does not allow it": {
			kind: "DestinationRule", spec: `{"host":"a","subsets":[{"name":"v1","trafficPolicy":{"tls":{"mode":"SIMPLE","insecureSkipVerify":true}}}]}`,
			refused: true,
		},
	}
	hook := validate.NewHandler(nil)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			admitted, reason := webhookVerdict(t, hook, tc.kind, tc.spec)
			problems := generatorProblems(t, tc.kind, tc.spec)
			if admitted == (tc.refused || tc.stricter) {
				t.Errorf("webhook: admitted %v, want %v (%s)", admitted, !admitted, reason)
			}
			if (len(problems) > 0) != tc.refused {
				t.Errorf("generator problems %q, want refused %v", problems, tc.refused)
			}
		})
	}
}

// webhookVerdict posts an object of kind and spec to the webhook.
func webhookVerdict(t *testing.T, h http.Handler, kind, spec string) (bool, string) {
	t.Helper()
	group := "security.istio.io"
	if kind == "DestinationRule" {
		group = "networking.istio.io"
	}
	obj := `{"apiVersion":"` + group + `/v1","kind":"` + kind + `","metadata":{"name":"p","namespace":"ns"},"spec":` + spec + `}`
	body, err := json.Marshal(map[string]any{"apiVersion": admission.APIVersionV1, "kind": "AdmissionReview", "request": admissionv1.AdmissionRequest{
		UID: "1", Kind: metav1.GroupVersionKind{Group: group, Version: "v1", Kind: kind}, Namespace: "ns", Name: "p",
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(obj)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out admission.Review
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("webhook answered %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	if out.Response.Result != nil {
		return out.Response.Allowed, out.Response.Result.Message
	}
	return out.Response.Allowed, ""
}

// generatorProblems are what the generator refuses of the object, as the
// problem log reports them.
func generatorProblems(t *testing.T, kind, spec string) []string {
	t.Helper()
	decode := func(m proto.Message) {
		if err := protojson.Unmarshal([]byte(spec), m); err != nil {
			t.Fatalf("decode %s: %v", kind, err)
		}
	}
	meta := model.Meta{Namespace: "ns", Name: "p"}
	var out []string
	switch kind {
	case "AuthorizationPolicy":
		ap := &model.AuthorizationPolicy{Meta: meta, Spec: &securityv1.AuthorizationPolicy{}}
		decode(ap.Spec)
		for _, p := range authz.Check([]*model.AuthorizationPolicy{ap}, authz.Options{TrustDomain: testTD, Flavor: authz.Envoy}) {
			out = append(out, p.String())
		}
	case "RequestAuthentication":
		ra := &model.RequestAuthentication{Meta: meta, Spec: &securityv1.RequestAuthentication{}}
		decode(ra.Spec)
		_, problems := reqauthn.Config([]*model.RequestAuthentication{ra}, allFetched{}, keyfetch.URLRule{})
		for _, p := range problems {
			out = append(out, p.String())
		}
	case "DestinationRule":
		dr := &model.DestinationRule{Meta: meta, Spec: &networkingv1.DestinationRule{}}
		decode(dr.Spec)
		for _, p := range originationProblems(dr, envoygen.Mesh{}) {
			if strings.Contains(p, refusedNoEndpoints) {
				out = append(out, p)
			}
		}
	default:
		t.Fatalf("kind %s", kind)
	}
	return out
}
