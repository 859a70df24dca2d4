package policy

import "fmt"

// What the gateway generators will read of a Gateway and of a
// VirtualService (issue 21's scope): any other field is reported as
// ignored, by its path, once these kinds are read. Until then they are
// not honoured and every object is reported whole; the kinds carry these
// functions so that reading them is the one change of their entry in
// kinds (Support Partly, no unread) and the reporter then reads their
// specs (Kind.NeedsSpec).
var (
	gatewayFields        = set("selector", "servers")
	serverFields         = set("port", "hosts", "tls", "name")
	serverPortFields     = set("number", "name", "protocol")
	serverTLSFields      = set("httpsRedirect", "mode", "serverCertificate", "privateKey", "caCertificates", "caCrl", "credentialName", "credentialNames", "tlsCertificates", "subjectAltNames", "verifyCertificateSpki", "verifyCertificateHash", "minProtocolVersion", "maxProtocolVersion", "cipherSuites", "caCertCredentialName")
	virtualServiceFields = set("hosts", "gateways", "http", "tls", "tcp", "exportTo")
	httpRouteFields      = set("name", "match", "route", "redirect", "directResponse", "rewrite", "timeout", "retries", "corsPolicy", "mirror", "mirrors", "mirrorPercentage", "headers")
	httpMatchFields      = set("name", "uri", "headers", "withoutHeaders", "queryParams", "method", "port", "ignoreUriCase", "gateways")
	httpDestFields       = set("destination", "weight", "headers")
	tlsMatchFields       = set("sniHosts", "port", "gateways")
	tcpMatchFields       = set("port", "gateways")
	routeDestFields      = set("destination", "weight")
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
		if tls["mode"] == "AUTO_PASSTHROUGH" {
			out = append(out, p+".tls.mode: AUTO_PASSTHROUGH is for east-west gateways of several clusters, not served")
		}
	}
	return out
}

func ignoredInVirtualService(_ map[string]string, spec map[string]any) []string {
	out := unknownFields("spec", spec, virtualServiceFields)
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
	}{{"tls", tlsMatchFields}, {"tcp", tcpMatchFields}} {
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
