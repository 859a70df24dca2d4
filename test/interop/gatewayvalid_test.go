package interop

import (
	"fmt"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/config/validation"
	"istio.io/istio/pkg/util/protomarshal"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// routingCase is one Gateway or VirtualService, named "gw" or "vs" in
// namespace "app" unless name says otherwise, whose spec is YAML.
type routingCase struct {
	vs          bool
	name        string
	annotations map[string]string
	spec        string
	// istioRefuses is what Istio's validator decides, written down so
	// that a change of Istio's rules shows.
	istioRefuses bool
	// stricter says why Bulwark refuses what Istio admits: a deliberate
	// difference, listed in pkg/inject/validate's documentation.
	stricter string
	// warns is whether Istio warns about the object; Bulwark must too.
	warns bool
}

const (
	httpServerYAML  = `{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*/a.example.com"]}`
	httpsServerYAML = `{port: {number: 443, name: https, protocol: HTTPS}, hosts: ["a.example.com"], tls: {mode: SIMPLE, credentialName: a-cert}}`
	aRoute          = `http: [{route: [{destination: {host: a.app.svc.cluster.local}}]}]`
)

func gw(servers ...string) string { return "servers: [" + strings.Join(servers, ", ") + "]" }

func server(proto, hosts, tls string) string {
	s := fmt.Sprintf(`{port: {number: 443, name: p, protocol: %s}, hosts: [%s]`, proto, hosts)
	if tls != "" {
		s += ", tls: " + tls
	}
	return s + "}"
}

func manyHosts(n int) string {
	h := make([]string, n)
	for i := range h {
		h[i] = fmt.Sprintf("h%d.example.com", i)
	}
	return strings.Join(h, ", ")
}

var routingCases = map[string]routingCase{
	// Gateways: the rules GATEWAY.md lists, and the rest of validateServer and validateTLSOptions.
	"an HTTP server for a host of any namespace":  {spec: gw(httpServerYAML)},
	"an HTTPS server with a credentialName":       {spec: gw(httpsServerYAML)},
	"a selector and both servers":                 {spec: "selector: {istio: ingressgateway}\n" + gw(httpServerYAML, httpsServerYAML)},
	"MUTUAL with a credentialName":                {spec: gw(server("HTTPS", "a.example.com", "{mode: MUTUAL, credentialName: c}"))},
	"OPTIONAL_MUTUAL with files and a CA":         {spec: gw(server("HTTPS", "a.example.com", "{mode: OPTIONAL_MUTUAL, serverCertificate: /c, privateKey: /k, caCertificates: /ca}"))},
	"ISTIO_MUTUAL without certificates":           {spec: gw(server("TLS", "a.example.com", "{mode: ISTIO_MUTUAL}"))},
	"PASSTHROUGH on a TLS server":                 {spec: gw(server("TLS", `"*.example.com"`, "{mode: PASSTHROUGH}"))},
	"host forms ns/, ./ and */":                   {spec: gw(server("HTTPS", `app/a.example.com, ./b.example.com, "*/c.example.com"`, "{mode: SIMPLE, credentialName: c}"))},
	"an IP address as a host":                     {spec: gw(server("HTTPS", "10.0.0.1", "{mode: SIMPLE, credentialName: c}"))},
	"no servers":                                  {spec: "selector: {istio: ingressgateway}", istioRefuses: true},
	"a server without hosts":                      {spec: gw(`{port: {number: 80, name: http, protocol: HTTP}, hosts: []}`), istioRefuses: true},
	"a short host name":                           {spec: gw(server("HTTPS", "foo", "{mode: SIMPLE, credentialName: c}")), istioRefuses: true},
	"a bad namespace in a host":                   {spec: gw(server("HTTPS", "bad_ns/a.example.com", "{mode: SIMPLE, credentialName: c}")), istioRefuses: true},
	"a partial wildcard host":                     {spec: gw(server("HTTPS", `"a*.example.com"`, "{mode: SIMPLE, credentialName: c}")), istioRefuses: true},
	"a port without a name":                       {spec: gw(`{port: {number: 80, protocol: HTTP}, hosts: [a.example.com]}`), istioRefuses: true},
	"two servers with one port name":              {spec: gw(httpServerYAML, `{port: {number: 81, name: http, protocol: HTTP}, hosts: [b.example.com]}`), istioRefuses: true},
	"an HTTPS server without TLS settings":        {spec: gw(server("HTTPS", "a.example.com", "")), istioRefuses: true},
	"an HTTP server with httpsRedirect only":      {spec: gw(`{port: {number: 80, name: http, protocol: HTTP}, hosts: [a.example.com], tls: {httpsRedirect: true}}`)},
	"an HTTP server terminating TLS":              {spec: gw(`{port: {number: 80, name: http, protocol: HTTP}, hosts: [a.example.com], tls: {mode: SIMPLE, credentialName: c}}`), istioRefuses: true},
	"a TCP server with TLS settings":              {spec: gw(server("TCP", "a.example.com", "{mode: PASSTHROUGH}")), istioRefuses: true},
	"two certificate sources":                     {spec: gw(server("HTTPS", "a.example.com", "{mode: SIMPLE, credentialName: c, serverCertificate: /c, privateKey: /k}")), istioRefuses: true},
	"MUTUAL with files but no CA":                 {spec: gw(server("HTTPS", "a.example.com", "{mode: MUTUAL, serverCertificate: /c, privateKey: /k}")), istioRefuses: true},
	"SIMPLE with a certificate but no key":        {spec: gw(server("HTTPS", "a.example.com", "{mode: SIMPLE, serverCertificate: /c}")), istioRefuses: true},
	"three certificates":                          {spec: gw(server("HTTPS", "a.example.com", "{mode: SIMPLE, tlsCertificates: [{serverCertificate: /a, privateKey: /a}, {serverCertificate: /b, privateKey: /b}, {serverCertificate: /c, privateKey: /c}]}")), warns: true},
	"ISTIO_MUTUAL with a credentialName":          {spec: gw(server("TLS", "a.example.com", "{mode: ISTIO_MUTUAL, credentialName: c}")), istioRefuses: true},
	"PASSTHROUGH with a credentialName":           {spec: gw(server("TLS", "a.example.com", "{mode: PASSTHROUGH, credentialName: c}")), warns: true},
	"a Gateway name that is not a DNS label":      {name: "my.gw", spec: gw(httpServerYAML), istioRefuses: true},
	"an unknown protocol":                         {spec: gw(`{port: {number: 80, name: http, protocol: FOO}, hosts: [a.example.com]}`), istioRefuses: true},
	"port 0":                                      {spec: gw(`{port: {number: 0, name: http, protocol: HTTP}, hosts: [a.example.com]}`), istioRefuses: true},
	"port 70000":                                  {spec: gw(`{port: {number: 70000, name: http, protocol: HTTP}, hosts: [a.example.com]}`), istioRefuses: true},
	"a bind that is not an address":               {spec: gw(`{port: {number: 80, name: http, protocol: HTTP}, bind: somewhere, hosts: [a.example.com]}`), istioRefuses: true},
	"a unix socket bind with port 0":              {spec: gw(`{port: {number: 0, name: http, protocol: HTTP}, bind: "unix:///var/run/gw.sock", hosts: [a.example.com]}`)},
	"a CRL with SIMPLE":                           {spec: gw(server("HTTPS", "a.example.com", "{mode: SIMPLE, serverCertificate: /c, privateKey: /k, caCrl: /crl}")), istioRefuses: true},
	"an unknown cipher suite":                     {spec: gw(server("HTTPS", "a.example.com", "{mode: SIMPLE, credentialName: c, cipherSuites: [NOPE]}")), warns: true},
	"httpsRedirect on an HTTPS server":            {spec: gw(server("HTTPS", "a.example.com", "{mode: SIMPLE, credentialName: c, httpsRedirect: true}")), warns: true},
	"TLS 1.0 without cipher suites":               {spec: gw(server("HTTPS", "a.example.com", "{mode: SIMPLE, credentialName: c, minProtocolVersion: TLSV1_0}")), warns: true},
	"a targetPort on a server":                    {spec: gw(`{port: {number: 80, targetPort: 8080, name: http, protocol: HTTP}, hosts: [a.example.com]}`), istioRefuses: true},
	"the dry-run annotation":                      {annotations: map[string]string{"istio.io/dry-run": "true"}, spec: gw(httpServerYAML), istioRefuses: true},
	"a CRL file beside a credentialName (MUTUAL)": {spec: gw(server("HTTPS", "a.example.com", "{mode: MUTUAL, credentialName: c, caCrl: /crl}")), stricter: "a caCrl file is not read with credentialName; a revocation list silently ignored is refused"},

	// VirtualServices.
	"a mesh VirtualService":                 {vs: true, spec: "hosts: [a]\n" + aRoute},
	"a VirtualService bound to a gateway":   {vs: true, spec: "hosts: [a.example.com]\ngateways: [istio-system/ingress]\n" + aRoute},
	"no routes":                             {vs: true, spec: "hosts: [a.example.com]", istioRefuses: true},
	"the host * bound to the mesh":          {vs: true, spec: `hosts: ["*"]` + "\n" + aRoute, istioRefuses: true},
	"the host * bound to a gateway":         {vs: true, spec: `hosts: ["*"]` + "\ngateways: [ingress]\n" + aRoute},
	"overlapping hosts":                     {vs: true, spec: `hosts: ["*.example.com", a.example.com]` + "\n" + aRoute, istioRefuses: true},
	"a delegate naming gateways":            {vs: true, spec: "gateways: [ingress]\n" + aRoute, istioRefuses: true},
	"a delegate":                            {vs: true, spec: aRoute},
	"a regex that does not parse":           {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {regex: "("}}], route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a regex longer than 1024 bytes":        {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {regex: "` + strings.Repeat("a", 1025) + `"}}], route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a regex of a small program":            {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {regex: "/v[0-9]+/.*"}, headers: {x-id: {regex: "[a-f0-9]{8}"}}}], route: [{destination: {host: a}}]}]`},
	"a regex too big for Envoy":             {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {regex: "` + strings.Repeat(`([a-z]{1000})`, 34) + `"}}], route: [{destination: {host: a}}]}]`, stricter: "Envoy behind pilot-agent refuses an RE2 program bigger than 32768 instructions (re2.max_program_size.error_level), Bulwark above half that; Istio checks only the length"},
	"a redirect with a route":               {vs: true, spec: `hosts: [a]` + "\n" + `http: [{redirect: {uri: /b}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a route without destination":           {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {prefix: /}}]}]`, istioRefuses: true},
	"weights adding up to 0":                {vs: true, spec: `hosts: [a]` + "\n" + `http: [{route: [{destination: {host: a}}, {destination: {host: b}}]}]`, istioRefuses: true},
	"weighted destinations":                 {vs: true, spec: `hosts: [a]` + "\n" + `http: [{route: [{destination: {host: a, subset: v1, port: {number: 80}}, weight: 90}, {destination: {host: a, subset: v2}, weight: 10}]}]`},
	"a destination host *":                  {vs: true, spec: `hosts: [a]` + "\n" + `http: [{route: [{destination: {host: "*"}}]}]`, istioRefuses: true},
	"a subset that is not a DNS label":      {vs: true, spec: `hosts: [a]` + "\n" + `http: [{route: [{destination: {host: a, subset: v_1}}]}]`, istioRefuses: true},
	"removing the host header":              {vs: true, spec: `hosts: [a]` + "\n" + `http: [{headers: {request: {remove: [Host]}}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"adding a pseudo-header":                {vs: true, spec: `hosts: [a]` + "\n" + `http: [{headers: {request: {add: {":path": /x}}}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a header value ending in %":            {vs: true, spec: `hosts: [a]` + "\n" + `http: [{headers: {response: {set: {x-a: "50%"}}}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a header value with an Envoy variable": {vs: true, spec: `hosts: [a]` + "\n" + `http: [{headers: {request: {set: {x-a: "%REQ(x-b)% 100%%"}}}, route: [{destination: {host: a}}]}]`},
	"retries disabled but configured":       {vs: true, spec: `hosts: [a]` + "\n" + `http: [{retries: {attempts: 0, retryOn: 5xx}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"an unknown retry condition":            {vs: true, spec: `hosts: [a]` + "\n" + `http: [{retries: {attempts: 2, retryOn: "503,bogus"}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"retries on a status and a condition":   {vs: true, spec: `hosts: [a]` + "\n" + `http: [{retries: {attempts: 2, perTryTimeout: 2s, retryOn: "503,connect-failure"}, route: [{destination: {host: a}}]}]`},
	"a fault with neither abort nor delay":  {vs: true, spec: `hosts: [a]` + "\n" + `http: [{fault: {}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"an abort status of 700":                {vs: true, spec: `hosts: [a]` + "\n" + `http: [{fault: {abort: {httpStatus: 700}}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a CORS method that is not one":         {vs: true, spec: `hosts: [a]` + "\n" + `http: [{corsPolicy: {allowOrigins: [{exact: "https://a"}], allowMethods: [FETCH]}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a timeout under a millisecond":         {vs: true, spec: `hosts: [a]` + "\n" + `http: [{timeout: 0.0005s, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"mirror and mirrors":                    {vs: true, spec: `hosts: [a]` + "\n" + `http: [{mirror: {host: b}, mirrors: [{destination: {host: c}}], route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a mirror percentage over 100":          {vs: true, spec: `hosts: [a]` + "\n" + `http: [{mirror: {host: b}, mirrorPercentage: {value: 150}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a mirror to another service":           {vs: true, spec: `hosts: [a]` + "\n" + `http: [{mirrors: [{destination: {host: b}, percentage: {value: 5}}], route: [{destination: {host: a}}]}]`},
	"a TLS route without SNI hosts":         {vs: true, spec: "hosts: [a.example.com]\ngateways: [ingress]\ntls: [{match: [{port: 443}], route: [{destination: {host: a}}]}]", istioRefuses: true},
	"an SNI host outside the hosts":         {vs: true, spec: "hosts: [a.example.com]\ngateways: [ingress]\ntls: [{match: [{sniHosts: [b.example.com]}], route: [{destination: {host: a}}]}]", istioRefuses: true},
	"a passthrough TLS route":               {vs: true, spec: `hosts: ["*.example.com"]` + "\ngateways: [ingress]\ntls: [{match: [{port: 443, sniHosts: [a.example.com]}], route: [{destination: {host: a, port: {number: 443}}}]}]"},
	"a TCP route without destination":       {vs: true, spec: "hosts: [a]\ntcp: [{match: [{port: 5432}]}]", istioRefuses: true},
	"JWT claim routing bound to the mesh":   {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{headers: {"@request.auth.claims.group": {exact: admin}}}], route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"JWT claim routing bound to a gateway":  {vs: true, spec: "hosts: [a.example.com]\ngateways: [ingress]\n" + `http: [{match: [{headers: {"@request.auth.claims.group": {exact: admin}}}], route: [{destination: {host: a}}]}]`},
	"a gateway reference ./name":            {vs: true, spec: "hosts: [a.example.com]\ngateways: [./ingress]\n" + aRoute, istioRefuses: true},
	"a bad gateway reference after mesh":    {vs: true, spec: "hosts: [a.example.com]\ngateways: [mesh, bad_ns/ingress]\n" + aRoute, stricter: "Istio stops checking gateway references at the first without a \"/\" (here \"mesh\"); Bulwark checks each"},
	"a legacy gateway reference":            {vs: true, spec: "hosts: [a.example.com]\ngateways: [ingress.istio-system]\n" + aRoute, warns: true},
	"exportTo . and its namespace":          {vs: true, spec: "hosts: [a]\nexportTo: [., app]\n" + aRoute, istioRefuses: true},
	"exportTo * and another":                {vs: true, spec: `hosts: [a]` + "\n" + `exportTo: ["*", other]` + "\n" + aRoute, istioRefuses: true},
	"uri and uriRegexRewrite":               {vs: true, spec: `hosts: [a]` + "\n" + `http: [{rewrite: {uri: /b, uriRegexRewrite: {match: "^/a", rewrite: /b}}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a direct response status of 100":       {vs: true, spec: `hosts: [a]` + "\n" + `http: [{directResponse: {status: 100}}]`, istioRefuses: true},
	"a direct response":                     {vs: true, spec: `hosts: [a]` + "\n" + `http: [{directResponse: {status: 503, body: {string: unavailable}}}]`},
	"the authority set twice":               {vs: true, spec: `hosts: [a]` + "\n" + `http: [{rewrite: {authority: b}, headers: {request: {set: {host: c}}}, route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"prefixRewrite with an exact uri match": {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {exact: /a}}], redirect: {prefixRewrite: /b}}]`, istioRefuses: true},
	"a source namespace that is not one":    {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{sourceNamespace: Not_A_NS}], route: [{destination: {host: a}}]}]`, istioRefuses: true},
	"a catch-all route before another":      {vs: true, spec: `hosts: [a]` + "\n" + `http: [{route: [{destination: {host: a}}]}, {match: [{uri: {prefix: /b}}], route: [{destination: {host: b}}]}]`, warns: true},
	"a match repeated in a later rule":      {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {exact: /a}}], route: [{destination: {host: a}}]}, {match: [{name: again, uri: {exact: /a}}], route: [{destination: {host: b}}]}]`, warns: true},
	"a shorter prefix before a longer one":  {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {prefix: /api}}], route: [{destination: {host: a}}]}, {match: [{uri: {prefix: /api/v2}}], route: [{destination: {host: b}}]}]`, warns: true},
	"a longer prefix before a shorter one":  {vs: true, spec: `hosts: [a]` + "\n" + `http: [{match: [{uri: {prefix: /api/v2}}], route: [{destination: {host: b}}]}, {match: [{uri: {prefix: /api}}], route: [{destination: {host: a}}]}]`},
	"a TCP rule after a catch-all":          {vs: true, spec: "hosts: [a]\ntcp: [{route: [{destination: {host: a}}]}, {match: [{port: 5432}], route: [{destination: {host: b}}]}]", warns: true},
	"2,000 hosts":                           {vs: true, spec: "hosts: [" + manyHosts(2000) + "]\n" + aRoute, stricter: "a VirtualService holds at most 1024 hosts: every gateway reading it pays for each"},
	"a Gateway name with dots under gateway semantics": {name: "a.b", annotations: map[string]string{"internal.istio.io/gateway-semantics": "gateway"}, spec: gw(httpServerYAML),
		stricter: "internal.istio.io/gateway-semantics is istiod's mark on its own Gateway API translations; a user setting it gets no relaxed rules"},
	"a VirtualService under route semantics": {vs: true, annotations: map[string]string{"internal.istio.io/route-semantics": "gateway"}, spec: "hosts: [a.example.com]\ngateways: [ns/Gw.x]\n" + aRoute,
		stricter: "internal.istio.io/route-semantics is istiod's mark on its own Gateway API translations; a user setting it gets no relaxed rules"},
	"the internal parents annotation": {vs: true, annotations: map[string]string{"internal.istio.io/parents": "x"}, spec: "hosts: [a]\n" + aRoute, istioRefuses: true},
}

// TestRoutingValidationMatchesIstio runs every case through Istio's own
// validator (pkg/config/validation ValidateGateway and
// ValidateVirtualService) and through package policy: both refuse or both
// admit, but for the deliberate differences, where Bulwark alone refuses;
// and Bulwark warns where Istio does.
func TestRoutingValidationMatchesIstio(t *testing.T) {
	if len(routingCases) < 40 {
		t.Fatalf("%d cases, want at least 40", len(routingCases))
	}
	var gateways, services, refused, stricter int
	for name, c := range routingCases {
		t.Run(name, func(t *testing.T) {
			var (
				warn    validation.Warning
				err     error
				f       policy.Findings
				cfgName = "gw"
			)
			if c.vs {
				cfgName = "vs"
			}
			if c.name != "" {
				cfgName = c.name
			}
			meta := config.Meta{Name: cfgName, Namespace: "app", Annotations: c.annotations}
			if c.vs {
				spec := &networking.VirtualService{}
				if e := protomarshal.ApplyYAMLStrict(c.spec, spec); e != nil {
					t.Fatalf("spec: %v", e)
				}
				meta.GroupVersionKind = gvk.VirtualService
				warn, err = validation.ValidateVirtualService(config.Config{Meta: meta, Spec: spec})
				f = policy.ValidateVirtualService(meta.Namespace, c.annotations, spec)
				services++
			} else {
				spec := &networking.Gateway{}
				if e := protomarshal.ApplyYAMLStrict(c.spec, spec); e != nil {
					t.Fatalf("spec: %v", e)
				}
				meta.GroupVersionKind = gvk.Gateway
				warn, err = validation.ValidateGateway(config.Config{Meta: meta, Spec: spec})
				f = policy.ValidateGateway(meta.Name, c.annotations, spec)
				gateways++
			}
			r, d := agreeWithIstio(t, f, err, warn, c.istioRefuses, c.warns, c.stricter)
			if r {
				refused++
			}
			if d {
				stricter++
			}
		})
	}
	t.Logf("%d Gateways, %d VirtualServices; %d refused, %d of them by Bulwark alone", gateways, services, refused, stricter)
}

// agreeWithIstio checks Bulwark's findings f against Istio's validator's
// error and warning for one case: Istio refuses as the case says, Bulwark
// decides as Istio unless the case is a deliberate, stricter difference,
// and warns where Istio warns. It reports whether Bulwark refused and
// whether the case was a deliberate difference.
func agreeWithIstio(t *testing.T, f policy.Findings, err error, warn error, istioRefuses, warns bool, stricter string) (refused, deliberate bool) {
	t.Helper()
	t.Logf("Istio: error %v; warning %v", err, warn)
	t.Logf("Bulwark: errors %q; warnings %q", f.Errors, f.Warnings)
	if (err != nil) != istioRefuses {
		t.Fatalf("Istio refuses: %t, the case says %t", err != nil, istioRefuses)
	}
	switch {
	case stricter != "":
		if istioRefuses || f.OK() {
			t.Fatalf("a deliberate difference (%s), but Istio refuses %t, Bulwark refuses %t", stricter, istioRefuses, !f.OK())
		}
	case f.OK() == (err != nil):
		t.Fatalf("Bulwark refuses: %t, Istio refuses: %t", !f.OK(), err != nil)
	}
	if err == nil && stricter == "" && (warn != nil) != (len(f.Warnings) > 0) {
		t.Errorf("Istio warns: %t, Bulwark warns: %t", warn != nil, len(f.Warnings) > 0)
	}
	if (warn != nil) != warns {
		t.Errorf("Istio warns: %t, the case says %t", warn != nil, warns)
	}
	return !f.OK(), stricter != ""
}
