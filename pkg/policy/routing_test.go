package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"
)

// The agreement of these rules with Istio's validator is tested in
// test/interop (TestRoutingValidationMatchesIstio); these tests cover what
// Istio does not have: the limits, Envoy's regex program size, and the
// bounds and order of the findings.

func TestCheckRegex(t *testing.T) {
	for re, want := range map[string]string{
		`/v[0-9]+/.*`:                       "",
		`^/api/v[0-9]+/users/[a-z0-9-]+$`:   "",
		`(?i)/static/.*\.(css|js|png|jpg)`:  "",
		`(`:                                 "is not RE2 syntax: missing closing )",
		`a(?=b)`:                            "is not RE2 syntax: invalid or unsupported Perl syntax",
		`(a|b){50}[a-z]{30}`:                "", // 182 instructions: above Envoy's default, within pilot-agent's
		`[a-z]{1000}`:                       "",
		strings.Repeat(`([a-z]{1000})`, 34): "compiles to a program of size 34070",
		`a{1001}`:                           "is not RE2 syntax: invalid repeat count",
		strings.Repeat("(", 1000) + "a" + strings.Repeat(")", 1000): "longer than 1024",
		strings.Repeat("(", 500) + "a" + strings.Repeat(")", 500):   "",
		strings.Repeat("a", 1025):                                   "regex of 1025 bytes is longer than 1024",
	} {
		got := CheckRegex(re)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("CheckRegex(%.40q) = %q, want %q", re, got, want)
		}
	}
}

func TestHeaderValue(t *testing.T) {
	for v, ok := range map[string]bool{
		"plain": true, "": true, "100%%": true, "%HOSTNAME%": true, "a %REQ(x-b)% c": true,
		`%REQ_WITH_FORMATTING(["a", "b"])%`: true, "%PER_REQUEST_STATE(x)%": true,
		"50%": false, "%UNCLOSED": false, "%A(x": false, `%A(["a" "b"])%`: false, "bell\a": false, "%A(x) %": true,
	} {
		if got := checkHeaderValue(v) == ""; got != ok {
			t.Errorf("header value %q: valid %t, want %t (%s)", v, got, ok, checkHeaderValue(v))
		}
	}
}

func TestHostMatching(t *testing.T) {
	for _, tc := range []struct {
		a, b            string
		overlap, within bool
	}{
		{"a.example.com", "a.example.com", true, true},
		{"a.example.com", "*.example.com", true, true},
		{"*.example.com", "a.example.com", true, false},
		{"*.a.example.com", "*.example.com", true, true},
		{"*.example.com", "*.a.example.com", true, false},
		{"a.example.com", "b.example.com", false, false},
		{"a.example.org", "*.example.com", false, false},
	} {
		if got := hostsOverlap(tc.a, tc.b); got != tc.overlap {
			t.Errorf("%s and %s overlap %t, want %t", tc.a, tc.b, got, tc.overlap)
		}
		if got := hostWithin(tc.a, tc.b); got != tc.within {
			t.Errorf("%s within %s %t, want %t", tc.a, tc.b, got, tc.within)
		}
	}
}

func fromYAML[M proto.Message](t *testing.T, y string, m M) M {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func gatewayOf(t *testing.T, y string) *networking.Gateway {
	return fromYAML(t, y, &networking.Gateway{})
}

func vsOf(t *testing.T, y string) *networking.VirtualService {
	return fromYAML(t, y, &networking.VirtualService{})
}

func TestRoutingLimits(t *testing.T) {
	server := func(i int, hosts int) *networking.Server {
		s := &networking.Server{Port: &networking.Port{Number: 80, Name: fmt.Sprintf("http-%d", i), Protocol: "HTTP"}}
		for j := range hosts {
			s.Hosts = append(s.Hosts, fmt.Sprintf("h%d.example.com", j))
		}
		return s
	}
	many := &networking.Gateway{}
	for i := range MaxGatewayServers {
		many.Servers = append(many.Servers, server(i, 1))
	}
	if f := ValidateGateway("gw", nil, many); !f.OK() {
		t.Errorf("%d servers refused: %v", MaxGatewayServers, f.Errors)
	}
	many.Servers = append(many.Servers, server(MaxGatewayServers, 1))
	if f := ValidateGateway("gw", nil, many); f.OK() || !strings.Contains(f.Errors[0], "more than 1024") {
		t.Errorf("%d servers: %v", len(many.Servers), f.Errors)
	}
	if f := ValidateGateway("gw", nil, &networking.Gateway{Servers: []*networking.Server{server(0, MaxHosts+1)}}); f.OK() {
		t.Error("a server of too many hosts admitted")
	}

	vs := &networking.VirtualService{Hosts: []string{"a"}}
	for range MaxRoutes + 1 {
		vs.Tcp = append(vs.Tcp, &networking.TCPRoute{Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "a"}}}})
	}
	if f := ValidateVirtualService("app", nil, vs); f.OK() || !strings.Contains(f.Errors[0], "more than 4096") {
		t.Errorf("%d routes: %v", len(vs.Tcp), f.Errors)
	}
	long := vsOf(t, `{hosts: [a], http: [{directResponse: {status: 200, body: {string: "`+strings.Repeat("x", MaxDirectResponseBytes+1)+`"}}}]}`)
	if f := ValidateVirtualService("app", nil, long); f.OK() {
		t.Error("a direct response over 1MiB admitted")
	}
}

// TestFindingsAreBoundedAndStable: an object of many bad fields gets the
// first maxFindings in a stable order and a count of the rest.
func TestFindingsAreBoundedAndStable(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{hosts: [a], http: [{route: [{destination: {host: a}}], headers: {request: {set: {`)
	for i := range 50 {
		fmt.Fprintf(&b, `":h%02d": v, `, i)
	}
	b.WriteString(`}}}}]}`)
	vs := vsOf(t, b.String())
	first := ValidateVirtualService("app", nil, vs)
	if len(first.Errors) != maxFindings || first.MoreErrors != 50-maxFindings {
		t.Fatalf("%d errors and %d more", len(first.Errors), first.MoreErrors)
	}
	for range 5 {
		if again := ValidateVirtualService("app", nil, vs); !slices.Equal(again.Errors, first.Errors) {
			t.Fatalf("order changed:\n%q\n%q", again.Errors, first.Errors)
		}
	}
	if !strings.HasPrefix(first.Errors[0], "spec.http[0].headers.request.set[:h00]: ") {
		t.Errorf("first error %q", first.Errors[0])
	}
}

func TestRoutingFindingsNameTheField(t *testing.T) {
	gw := gatewayOf(t, `{servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: [a.example.com], tls: {mode: MUTUAL, serverCertificate: /c, privateKey: /k}}]}`)
	if f := ValidateGateway("gw", nil, gw); !slices.Equal(f.Errors, []string{"spec.servers[0].tls.caCertificates: MUTUAL TLS needs a client CA bundle"}) {
		t.Errorf("errors %q", f.Errors)
	}
	vs := vsOf(t, `{hosts: [a], http: [{match: [{uri: {regex: "`+strings.Repeat(`([a-z]{1000})`, 34)+`"}}], route: [{destination: {host: a}}]}]}`)
	f := ValidateVirtualService("app", nil, vs)
	if len(f.Errors) != 1 || !strings.HasPrefix(f.Errors[0], "spec.http[0].match[0].uri: regex \"([a-z]{1000})") ||
		!strings.Contains(f.Errors[0], "compiles to a program of size 34070") {
		t.Errorf("errors %q", f.Errors)
	}
}

// TestRoutingFieldsRead: routers read Gateways and VirtualServices; what
// they leave out is reported by path.
func TestRoutingFieldsRead(t *testing.T) {
	for name, tc := range map[string]struct {
		kind, spec string
		want       []string
	}{
		"a Gateway of the generator's fields": {kind: "Gateway", spec: `{"selector":{"istio":"ingressgateway"},"servers":[{"port":{"number":443,"name":"https","protocol":"HTTPS"},"name":"s","hosts":["a"],"tls":{"mode":"MUTUAL","credentialName":"c","subjectAltNames":["x"],"minProtocolVersion":"TLSV1_2","insecureSkipVerify":true}}]}`},
		"a bind, a default endpoint and AUTO_PASSTHROUGH": {kind: "Gateway", spec: `{"servers":[{"port":{"number":15443,"name":"tls","protocol":"TLS","targetPort":15443},"bind":"10.0.0.1","defaultEndpoint":"127.0.0.1:8080","hosts":["*.local"],"tls":{"mode":"AUTO_PASSTHROUGH"}}]}`,
			want: []string{"spec.servers[0].bind: ignored, not generated", "spec.servers[0].defaultEndpoint: ignored, not generated",
				"spec.servers[0].port.targetPort: ignored, not generated"}},
		"a VirtualService of the translation's fields": {kind: "VirtualService", spec: `{"hosts":["a"],"gateways":["gw"],"exportTo":["."],"http":[{"name":"r","match":[{"uri":{"prefix":"/"},"ignoreUriCase":true,"authority":{"exact":"a"},"sourceLabels":{"app":"x"},"queryParams":{"q":{"exact":"1"}}}],"route":[{"destination":{"host":"a"},"weight":100,"headers":{"request":{"set":{"x":"y"}}}}],"mirror":{"host":"b"},"mirrorPercentage":{"value":5},"retries":{"attempts":2},"fault":{"abort":{"httpStatus":500}},"corsPolicy":{},"timeout":"1s"}],"tls":[{"match":[{"sniHosts":["a"],"port":443}],"route":[{"destination":{"host":"a"}}]}],"tcp":[{"match":[{"port":5432}],"route":[{"destination":{"host":"a"},"weight":100}]}]}`},
		"a delegate's http rules":                      {kind: "VirtualService", spec: `{"http":[{"match":[{"uri":{"prefix":"/a"}}],"route":[{"destination":{"host":"a"}}]}]}`},
		"L4 source and subnet matches are reported for gateways": {kind: "VirtualService", spec: `{"hosts":["a"],"gateways":["gw"],"tcp":[{"match":[{"port":5432,"destinationSubnets":["10.0.0.0/8"],"sourceLabels":{"a":"b"}}],"route":[{"destination":{"host":"a"}}]}],"tls":[{"match":[{"sniHosts":["a"],"sourceNamespace":"x"}],"route":[{"destination":{"host":"a"}}]}]}`,
			want: []string{"spec.tls[0].match[0].sourceNamespace: ignored, not generated",
				"spec.tcp[0].match[0].destinationSubnets: ignored, not generated", "spec.tcp[0].match[0].sourceLabels: ignored, not generated"}},
		"a VirtualService for sidecars and a gateway":                             {kind: "VirtualService", spec: `{"hosts":["a"],"gateways":["gw","mesh"],"http":[{"route":[{"destination":{"host":"a"}}]}]}`},
		"a VirtualService without gateways is for sidecars":                       {kind: "VirtualService", spec: `{"hosts":["a"],"http":[{"route":[{"destination":{"host":"a"}}]}]}`},
		"sidecars apply tls and tcp routes, with their source and subnet matches": {kind: "VirtualService", spec: `{"hosts":["a"],"tcp":[{"match":[{"destinationSubnets":["10.0.0.0/8"],"sourceLabels":{"a":"b"},"sourceNamespace":"x"}],"route":[{"destination":{"host":"a"}}]}],"tls":[{"match":[{"sniHosts":["a"],"destinationSubnets":["10.0.0.1"],"sourceLabels":{"a":"b"},"sourceNamespace":"x"}],"route":[{"destination":{"host":"a"}}]}]}`},
		"sidecars do not read a tcp match's sourceSubnet": {kind: "VirtualService", spec: `{"hosts":["a"],"gateways":["mesh"],"tcp":[{"match":[{"sourceSubnet":"10.0.0.0/8"}],"route":[{"destination":{"host":"a"}}]}]}`,
			want: []string{"spec.tcp[0].match[0].sourceSubnet: ignored, not generated"}},
	} {
		t.Run(name, func(t *testing.T) {
			k := mustLookup(t, groupNetworking, tc.kind)
			if k.Support != Partly || !k.NeedsSpec() {
				t.Fatalf("%s: support %s, needs its spec %v; want partly, read", tc.kind, k.Support, k.NeedsSpec())
			}
			if got := k.Ignored(nil, spec(t, tc.spec)); !slices.Equal(got, tc.want) {
				t.Errorf("ignored\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
