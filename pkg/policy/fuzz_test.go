package policy

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
)

// FuzzRoutingRules drives arbitrary Gateway and VirtualService specs
// (protojson, as the webhook decodes them) and arbitrary regexes through
// the rules. Nothing may panic; findings stay within their bound; a
// VirtualService admitted holds no regex CheckRegex refuses.
func FuzzRoutingRules(f *testing.F) {
	f.Add([]byte(`{"servers":[{"port":{"number":443,"name":"https","protocol":"HTTPS"},"hosts":["*/a.example.com"],"tls":{"mode":"MUTUAL","credentialName":"c","cipherSuites":["-ALL","NOPE"]}}]}`), false, "app", `/v[0-9]+/.*`)
	f.Add([]byte(`{"hosts":["a"],"gateways":["mesh","ns/gw","gw.ns"],"http":[{"match":[{"uri":{"regex":"(a|b){50}"},"headers":{"@request.auth.claims[x]":{"prefix":""}}}],"route":[{"destination":{"host":"a"},"weight":-1}],"headers":{"request":{"set":{"x":"%REQ(a"}}}}]}`), true, "app", strings.Repeat("(", 999)+strings.Repeat(")", 999))
	f.Add([]byte(`{"hosts":["*.a","b.a"],"tls":[{"match":[{"sniHosts":["outbound_.80_._.x"]}]}],"tcp":[{}],"exportTo":[".","app","*","~"]}`), true, ".", `\pL{1000}`)
	f.Add([]byte(`{"servers":[{"port":{"number":0,"name":"","protocol":""},"bind":"unix://","hosts":["./","*/*",""],"tls":{"mode":99}}]}`), false, "", strings.Repeat("a|", 600))
	f.Fuzz(func(t *testing.T, spec []byte, isVS bool, namespace, re string) {
		var findings Findings
		if isVS {
			vs := &networking.VirtualService{}
			if protojson.Unmarshal(spec, vs) != nil {
				return
			}
			findings = ValidateVirtualService(namespace, map[string]string{"a": "b"}, vs)
			if findings.OK() {
				for _, r := range vs.GetHttp() {
					for _, m := range r.GetMatch() {
						if m.GetUri().GetRegex() != "" && CheckRegex(m.GetUri().GetRegex()) != "" {
							t.Fatalf("admitted a regex Envoy refuses: %q", m.GetUri().GetRegex())
						}
					}
				}
			}
		} else {
			gw := &networking.Gateway{}
			if protojson.Unmarshal(spec, gw) != nil {
				return
			}
			findings = ValidateGateway(namespace, nil, gw)
		}
		if len(findings.Errors) > maxFindings || len(findings.Warnings) > maxFindings {
			t.Fatalf("%d errors, %d warnings: unbounded", len(findings.Errors), len(findings.Warnings))
		}
		_ = CheckRegex(re)
	})
}
