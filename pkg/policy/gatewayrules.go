package policy

import (
	"path"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// Metadata annotations Istio refuses on a Gateway or a VirtualService.
const (
	annotationDryRun       = "istio.io/dry-run"
	annotationAlwaysReject = "internal.istio.io/webhook-always-reject"
	annotationParents      = "internal.istio.io/parents"
	annotationParentNS     = "internal.istio.io/parent-namespace"
)

// checkMetadata refuses the annotations Istio's webhook refuses on these
// kinds: istio.io/dry-run (an AuthorizationPolicy's only), and those that
// only istiod's own translations may set.
func checkMetadata(f *Findings, annotations map[string]string) {
	if _, ok := annotations[annotationDryRun]; ok {
		f.errorf("metadata.annotations["+annotationDryRun+"]", "only an AuthorizationPolicy may be dry-run")
	}
	if _, ok := annotations[annotationAlwaysReject]; ok {
		f.errorf("metadata.annotations["+annotationAlwaysReject+"]", "refused on request")
	}
	for _, a := range []string{annotationParents, annotationParentNS} {
		if _, ok := annotations[a]; ok {
			f.errorf("metadata.annotations["+a+"]", "internal to istiod; may not be set")
		}
	}
}

// ValidateGateway checks a networking.istio.io Gateway as Istio's
// validation does (pkg/config/validation ValidateGateway, validateServer,
// validateTLSOptions), and within this package's limits. Errors refuse
// it; warnings are Istio's.
func ValidateGateway(name string, annotations map[string]string, spec *networking.Gateway) Findings {
	var f Findings
	checkMetadata(&f, annotations)
	if !isDNSLabel(name) {
		f.errorf("metadata.name", "%s is not a DNS label", quote(name))
	}
	servers := spec.GetServers()
	switch {
	case len(servers) == 0:
		f.errorf("spec.servers", "a Gateway needs at least one server")
	case len(servers) > MaxGatewayServers:
		f.errorf("spec.servers", "%d servers, more than %d", len(servers), MaxGatewayServers)
		return f
	}
	names := map[string]bool{}
	for i, s := range servers {
		p := at("spec.servers", i)
		if s == nil {
			f.errorf(p, "must not be null")
			continue
		}
		checkServer(&f, p, s)
		if port := s.GetPort(); port != nil {
			if names[port.GetName()] {
				f.errorf(p+".port.name", "%s names another server's port: port names must be unique", quote(port.GetName()))
			}
			names[port.GetName()] = true
			if !isHTTP(port.GetProtocol()) && s.GetTls().GetHttpsRedirect() {
				f.warnf(p+".tls.httpsRedirect", "only has an effect on HTTP servers")
			}
		}
	}
	return f
}

func checkServer(f *Findings, p string, s *networking.Server) {
	hosts := s.GetHosts()
	switch {
	case len(hosts) == 0:
		f.errorf(p+".hosts", "a server needs at least one host")
	case len(hosts) > MaxHosts:
		f.errorf(p+".hosts", "%d hosts, more than %d", len(hosts), MaxHosts)
	default:
		for i, h := range hosts {
			f.check(at(p+".hosts", i), checkGatewayHost(h))
		}
	}
	portOK := checkServerPort(f, p+".port", s.GetPort(), s.GetBind())
	checkServerBind(f, p+".bind", s.GetPort(), s.GetBind())
	checkServerTLS(f, p+".tls", s.GetTls())
	if !portOK {
		return
	}
	tls := s.GetTls()
	switch proto := s.GetPort().GetProtocol(); {
	case isTLS(proto) && tls == nil:
		f.errorf(p+".tls", "an %s server needs TLS settings", strings.ToUpper(proto))
	case isTLS(proto) || tls == nil:
	case isHTTP(proto):
		// Only httpsRedirect: a plaintext HTTP server terminates no TLS.
		if !passthrough(tls.GetMode()) || tls.GetCaCertificates() != "" || tls.GetPrivateKey() != "" || tls.GetServerCertificate() != "" {
			f.errorf(p+".tls", "a plaintext HTTP server may only set httpsRedirect")
		}
	default:
		f.errorf(p+".tls", "a %s server cannot have TLS settings", strings.ToUpper(proto))
	}
}

// checkGatewayHost checks a server host: "ns/host", "./host", "*/host" or
// a bare host; the host a (wildcard) FQDN, "*" or an IP address.
func checkGatewayHost(h string) string {
	ns, host, slash := strings.Cut(h, "/")
	if !slash {
		return checkGatewayHostName(h)
	}
	if ns == "" || host == "" {
		return "host " + quote(h) + ": namespace and name cannot be empty"
	}
	if ns != "*" && ns != "." && !isDNSLabel(ns) {
		return "host " + quote(h) + ": invalid namespace " + quote(ns)
	}
	return checkGatewayHostName(host)
}

func checkGatewayHostName(h string) string {
	if h != "*" && !strings.Contains(h, ".") {
		return "host " + quote(h) + " is a short name; only FQDNs are allowed"
	}
	if msg := checkWildcardName(h); msg != "" && !isIP(h) {
		return msg
	}
	return checkPartialWildcard(h)
}

const unixPrefix = "unix://"

// checkServerPort reports whether the port has no error.
func checkServerPort(f *Findings, p string, port *networking.Port, bind string) bool {
	if port == nil {
		f.errorf(p, "must be set")
		return false
	}
	before := len(f.Errors) + f.MoreErrors
	if !knownProtocol(port.GetProtocol()) {
		f.errorf(p+".protocol", "%s is not one of HTTP, HTTPS, GRPC, GRPC-WEB, HTTP2, TCP, TLS, MONGO, REDIS, MYSQL, UDP", quote(port.GetProtocol()))
	}
	if port.GetNumber() > 0 || !strings.HasPrefix(bind, unixPrefix) {
		f.check(p+".number", checkPort(int64(port.GetNumber())))
	}
	if port.GetTargetPort() > 0 { //nolint:staticcheck // Istio refuses the deprecated field on Gateways.
		f.errorf(p+".targetPort", "has no effect on Gateways")
	}
	if port.GetName() == "" {
		f.errorf(p+".name", "must be set")
	}
	return len(f.Errors)+f.MoreErrors == before
}

func checkServerBind(f *Findings, p string, port *networking.Port, bind string) {
	if uds, ok := strings.CutPrefix(bind, unixPrefix); ok {
		if uds == "" || (!strings.HasPrefix(uds, "@") && (!path.IsAbs(uds) || strings.HasSuffix(uds, "/"))) {
			f.errorf(p, "%s is not an absolute path to a socket", quote(uds))
		}
		if port.GetNumber() != 0 {
			f.errorf(p, "port number must be 0 for a unix domain socket")
		}
		return
	}
	if bind != "" && !isIP(bind) {
		f.errorf(p, "%s is not an IP address", quote(bind))
	}
}

// protocols Istio knows, lower-cased.
var protocols = map[string]bool{
	"tcp": true, "udp": true, "grpc": true, "grpc-web": true, "http": true, "http_proxy": true, "http2": true,
	"https": true, "tls": true, "mongo": true, "redis": true, "mysql": true,
}

func knownProtocol(p string) bool { return protocols[strings.ToLower(p)] }

func isHTTP(p string) bool {
	switch strings.ToLower(p) {
	case "http", "http2", "http_proxy", "grpc", "grpc-web":
		return true
	}
	return false
}

func isTLS(p string) bool {
	switch strings.ToLower(p) {
	case "https", "tls":
		return true
	}
	return false
}

func passthrough(m networking.ServerTLSSettings_TLSmode) bool {
	return m == networking.ServerTLSSettings_PASSTHROUGH || m == networking.ServerTLSSettings_AUTO_PASSTHROUGH
}
