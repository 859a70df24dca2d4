package policy

import (
	"fmt"
	"slices"
)

// What routers read of a Gateway and of a VirtualService: the router
// generator (pkg/xds/envoygen gateway*.go) and the VirtualService
// translation (pkg/xds/routes). Any other field is reported as ignored,
// by its path.
var (
	gatewayFields        = set("selector", "servers")
	serverFields         = set("port", "hosts", "tls", "name")
	serverPortFields     = set("number", "name", "protocol")
	serverTLSFields      = set("httpsRedirect", "mode", "serverCertificate", "privateKey", "caCertificates", "caCrl", "credentialName", "credentialNames", "tlsCertificates", "subjectAltNames", "verifyCertificateSpki", "verifyCertificateHash", "minProtocolVersion", "maxProtocolVersion", "cipherSuites", "caCertCredentialName", "insecureSkipVerify")
	virtualServiceFields = set("hosts", "gateways", "http", "tls", "tcp", "exportTo")
	httpRouteFields      = set("name", "match", "route", "redirect", "directResponse", "delegate", "rewrite", "timeout", "retries", "fault", "corsPolicy", "mirror", "mirrors", "mirrorPercent", "mirrorPercentage", "headers")
	httpMatchFields      = set("name", "uri", "scheme", "method", "authority", "headers", "withoutHeaders", "queryParams", "port", "ignoreUriCase", "gateways", "sourceLabels", "sourceNamespace", "statPrefix")
	httpDestFields       = set("destination", "weight", "headers")
	tlsMatchFields       = set("sniHosts", "port", "gateways")
	tcpMatchFields       = set("port", "gateways")
	// Sidecars read these too of a VirtualService bound to "mesh";
	// gateways do not, as Istio's do not.
	meshTLSMatchFields = set("sniHosts", "port", "gateways", "destinationSubnets", "sourceLabels", "sourceNamespace")
	meshTCPMatchFields = set("port", "gateways", "destinationSubnets", "sourceLabels", "sourceNamespace")
	routeDestFields    = set("destination", "weight")
)

func ignoredInGateway(_ map[string]string, spec map[string]any) []string {
	out := unknownFields("spec", spec, gatewayFields)
	for i, s := range list(spec["servers"]) {
		p := fmt.Sprintf("spec.servers[%d]", i)
		server := object(s)
		out = append(out, unknownFields(p, server, serverFields)...)
		out = append(out, unknownFields(p+".port", object(server["port"]), serverPortFields)...)
		tls := object(server["tls"])
		out = append(out, unknownFields(p+".tls", tls, serverTLSFields)...)
	}
	return out
}

func ignoredInVirtualService(_ map[string]string, spec map[string]any) []string {
	out := unknownFields("spec", spec, virtualServiceFields)
	// Sidecars read the http, tls and tcp routes of a VirtualService
	// bound to "mesh" (explicitly, or by naming no gateway), and of its
	// tls and tcp matches more than gateways do.
	gws := list(spec["gateways"])
	tlsMatch, tcpMatch := tlsMatchFields, tcpMatchFields
	if len(gws) == 0 || slices.Contains(gws, any("mesh")) {
		tlsMatch, tcpMatch = meshTLSMatchFields, meshTCPMatchFields
	}
	for i, r := range list(spec["http"]) {
		p := fmt.Sprintf("spec.http[%d]", i)
		route := object(r)
		out = append(out, unknownFields(p, route, httpRouteFields)...)
		for j, m := range list(route["match"]) {
			out = append(out, unknownFields(fmt.Sprintf("%s.match[%d]", p, j), object(m), httpMatchFields)...)
		}
		for j, d := range list(route["route"]) {
			out = append(out, unknownFields(fmt.Sprintf("%s.route[%d]", p, j), object(d), httpDestFields)...)
		}
	}
	for _, l4 := range []struct {
		field string
		match map[string]bool
	}{{"tls", tlsMatch}, {"tcp", tcpMatch}} {
		for i, r := range list(spec[l4.field]) {
			p := fmt.Sprintf("spec.%s[%d]", l4.field, i)
			route := object(r)
			out = append(out, unknownFields(p, route, set("match", "route"))...)
			for j, m := range list(route["match"]) {
				out = append(out, unknownFields(fmt.Sprintf("%s.match[%d]", p, j), object(m), l4.match)...)
			}
			for j, d := range list(route["route"]) {
				out = append(out, unknownFields(fmt.Sprintf("%s.route[%d]", p, j), object(d), routeDestFields)...)
			}
		}
	}
	return out
}
