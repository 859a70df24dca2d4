package validate

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/inject/admission"
)

// FuzzValidate drives arbitrary AdmissionReview bodies through the handler
// and arbitrary specs of each kind through the validator. Neither may
// panic; a 200 always carries a response with the request's UID.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE",`+
		`"kind":{"group":"security.istio.io","version":"v1","kind":"AuthorizationPolicy"},`+
		`"object":{"metadata":{"name":"a"},"spec":{"action":"DENY","rules":[{"from":[{"source":{"principals":["*/ns/a/sa/b"]}}]}]}}}}`),
		uint8(1), `{"rules":[{"to":[{"operation":{"paths":["/a/{*}/{**}"]}}],"when":[{"key":"request.headers[x]","values":["v"]}]}]}`)
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"2",`+
		`"kind":{"group":"networking.istio.io","version":"v1alpha3","kind":"DestinationRule"},"object":{"spec":{"host":"*.a"}}}}`),
		uint8(3), `{"host":"a","trafficPolicy":{"tls":{"mode":"MUTUAL","credentialName":"c"},"portLevelSettings":[{"port":{"number":1}}]}}`)
	f.Add([]byte("{not json"), uint8(0), `{"selector":{"matchLabels":{"a":"b"}},"portLevelMtls":{"80":{"mode":"STRICT"}}}`)
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"3",`+
		`"kind":{"group":"networking.istio.io","version":"v1","kind":"VirtualService"},"object":{"spec":{"hosts":["a"],"http":[{"match":[{"uri":{"regex":"(a"}}]}]}}}}`),
		uint8(5), `{"hosts":["*"],"gateways":["mesh"],"http":[{"redirect":{"uri":"/"},"route":[{"destination":{"host":"a"}}]}]}`)
	f.Add([]byte(`{}`), uint8(4), `{"servers":[{"port":{"number":443,"name":"a","protocol":"HTTPS"},"hosts":["a/b.c"],"tls":{"mode":"ISTIO_MUTUAL","credentialName":"x"}}]}`)
	f.Add([]byte(`{}`), uint8(2), `{"jwtRules":[{"issuer":"i","jwksUri":"https://[::1]:99999/x","timeout":"-1s"}]}`)

	h := NewHandler(nil)
	names := []string{"PeerAuthentication", "AuthorizationPolicy", "RequestAuthentication", "DestinationRule", "Gateway", "VirtualService"}
	f.Fuzz(func(t *testing.T, body []byte, which uint8, spec string) {
		rec := post(t, h, "/validate", "application/json", body)
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("handler panicked or failed on %q", body)
		}
		if rec.Code == http.StatusOK {
			var in, out admission.Review
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("200 without a response: %v", err)
			}
			if json.Unmarshal(body, &in) == nil && in.Request != nil && out.Response.UID != in.Request.UID {
				t.Fatalf("uid %q not echoed as %q", in.Request.UID, out.Response.UID)
			}
		}
		k := kinds[names[int(which)%len(names)]]
		obj := append(append([]byte(`{"metadata":{"name":"f"},"spec":`), spec...), '}')
		_, _ = validateObject(k, obj, rules{})
		_, _ = validateObject(k, obj, rules{jwksURLs: keyfetch.URLRule{LoopbackHTTP: true}})
	})
}
