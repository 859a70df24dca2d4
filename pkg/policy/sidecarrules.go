package policy

import (
	"net"
	"path"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Limits on a Sidecar: what one object may make the generators scope by.
const (
	// MaxSidecarListeners bounds its egress and its ingress listeners,
	// each.
	MaxSidecarListeners = 128
	// MaxSidecarHosts bounds the egress hosts of all its listeners
	// together: each proxy it selects matches every service against them
	// (the model reads no more of one).
	MaxSidecarHosts = model.MaxSidecarHosts
)

// modeAllowAnyDynamicDNS is mesh config's ALLOW_ANY_DYNAMIC_DNS, which a
// Sidecar's outboundTrafficPolicy may not name.
const modeAllowAnyDynamicDNS = 3

// ValidateSidecar checks a networking.istio.io Sidecar of namespace as
// Istio's validation does (pkg/config/validation ValidateSidecar), and
// within this package's limits. Errors refuse it; warnings are Istio's.
func ValidateSidecar(namespace string, spec *networking.Sidecar) Findings {
	var f Findings
	checkEntrySelector(&f, spec.GetWorkloadSelector())
	if len(spec.GetEgress()) == 0 && len(spec.GetIngress()) == 0 && spec.GetOutboundTrafficPolicy() == nil && spec.GetInboundConnectionPool() == nil {
		f.errorf("spec", "empty: a Sidecar needs egress, ingress, outboundTrafficPolicy or inboundConnectionPool")
		return f
	}
	if n := len(spec.GetEgress()); n > MaxSidecarListeners {
		f.errorf("spec.egress", "%d listeners, more than %d", n, MaxSidecarListeners)
		return f
	}
	if n := len(spec.GetIngress()); n > MaxSidecarListeners {
		f.errorf("spec.ingress", "%d listeners, more than %d", n, MaxSidecarListeners)
		return f
	}
	hosts := 0
	for _, e := range spec.GetEgress() {
		hosts += len(e.GetHosts())
	}
	if hosts > MaxSidecarHosts {
		f.errorf("spec.egress", "%d hosts, more than %d", hosts, MaxSidecarHosts)
		return f
	}
	checkSidecarIngress(&f, spec.GetIngress())
	checkConnectionPool(&f, "spec.inboundConnectionPool", spec.GetInboundConnectionPool())
	checkSidecarEgress(&f, namespace, spec.GetEgress())
	checkOutboundPolicy(&f, "spec.outboundTrafficPolicy", spec.GetOutboundTrafficPolicy())
	return f
}

func checkSidecarIngress(f *Findings, ingress []*networking.IstioIngressListener) {
	ports := map[uint32]bool{}
	for i, in := range ingress {
		p := at("spec.ingress", i)
		if in == nil {
			f.errorf(p, "must not be null")
			continue
		}
		port := in.GetPort()
		if port == nil {
			f.errorf(p+".port", "required for ingress listeners")
			continue
		}
		if port.GetTargetPort() > 0 { //nolint:staticcheck // Istio refuses the deprecated field.
			f.errorf(p+".port.targetPort", "has no effect on Sidecars")
		}
		checkSidecarPort(f, p+".port", port)
		f.check(p+".port.number", checkPort(int64(port.GetNumber())))
		if b := in.GetBind(); b != "" && !isIP(b) {
			f.errorf(p+".bind", "%s is not an IP address", quote(b))
		}
		if ports[port.GetNumber()] {
			f.errorf(p+".port.number", "ports on IP bound listeners must be unique")
		}
		ports[port.GetNumber()] = true
		checkDefaultEndpoint(f, p+".defaultEndpoint", in.GetDefaultEndpoint())
		if tls := in.GetTls(); tls != nil {
			checkIngressTLS(f, p+".tls", port, tls)
		}
		checkConnectionPool(f, p+".connectionPool", in.GetConnectionPool())
		if in.GetConnectionPool().GetHttp() != nil && !isHTTP(port.GetProtocol()) {
			f.warnf(p+".connectionPool.http", "port %d is not HTTP (%s): only the TCP settings apply", port.GetNumber(), quote(port.GetProtocol()))
		}
	}
}

func checkIngressTLS(f *Findings, p string, port *networking.SidecarPort, tls *networking.ServerTLSSettings) {
	if len(tls.GetSubjectAltNames()) > 0 {
		f.errorf(p+".subjectAltNames", "not supported in ingress TLS")
	}
	if tls.GetHttpsRedirect() {
		f.errorf(p+".httpsRedirect", "not supported")
	}
	if tls.GetCredentialName() != "" || len(tls.GetCredentialNames()) > 0 {
		f.errorf(p, "credentialName(s) not supported")
	}
	if len(tls.GetTlsCertificates()) > 0 {
		f.errorf(p+".tlsCertificates", "not supported")
	}
	if m := tls.GetMode(); m == networking.ServerTLSSettings_ISTIO_MUTUAL || m == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
		f.errorf(p+".mode", "%s cannot be used in sidecar ingress TLS", m)
	}
	if !isTLS(port.GetProtocol()) {
		f.errorf(p, "TLS settings on a port neither HTTPS nor TLS")
	}
	checkServerTLS(f, p, tls)
}

// checkDefaultEndpoint: "127.0.0.1:<port>", "0.0.0.0:<port>", "[::1]:<port>",
// "[::]:<port>", ":<port>" or "unix://<absolute path>".
func checkDefaultEndpoint(f *Findings, p, ep string) {
	if ep == "" {
		return
	}
	if uds, ok := strings.CutPrefix(ep, unixPrefix); ok {
		checkUnixPath(f, p, uds)
		return
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		f.errorf(p, "%s is not host:port", quote(ep))
		return
	}
	switch host {
	case "", "127.0.0.1", "0.0.0.0", "::1", "::":
	default:
		f.errorf(p, "must be 127.0.0.1:<port>, 0.0.0.0:<port>, [::1]:<port>, [::]:<port> or unix://<path>")
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		f.errorf(p, "port %s is not a number", quote(port))
		return
	}
	f.check(p, checkPort(int64(n)))
}

func checkUnixPath(f *Findings, p, uds string) {
	if uds == "" || (!strings.HasPrefix(uds, "@") && (!path.IsAbs(uds) || strings.HasSuffix(uds, "/"))) {
		f.errorf(p, "%s is not an absolute path to a socket", quote(uds))
	}
}

// checkSidecarPort checks a port's name and protocol, which may be empty.
func checkSidecarPort(f *Findings, p string, port *networking.SidecarPort) {
	if n := port.GetName(); n != "" && !isDNSLabel(n) {
		f.errorf(p+".name", "%s is not a DNS label", quote(n))
	}
	if proto := port.GetProtocol(); proto != "" && !knownProtocol(proto) {
		f.errorf(p+".protocol", "%s is not a protocol Istio knows", quote(proto))
	}
}

func checkSidecarEgress(f *Findings, namespace string, egress []*networking.IstioEgressListener) {
	ports, sockets := map[uint32]bool{}, map[string]bool{}
	catchAll := false
	for i, e := range egress {
		p := at("spec.egress", i)
		if e == nil {
			f.errorf(p, "must not be null")
			continue
		}
		if port := e.GetPort(); port == nil {
			switch {
			case catchAll:
				f.errorf(p, "only one egress listener may leave its port empty")
				continue
			case i != len(egress)-1:
				f.errorf(p, "the egress listener without a port must be the last")
			default:
				catchAll = true
			}
		} else {
			if port.GetTargetPort() > 0 { //nolint:staticcheck // Istio refuses the deprecated field.
				f.errorf(p+".port.targetPort", "has no effect on Sidecars")
			}
			checkSidecarPort(f, p+".port", port)
			checkEgressBind(f, p, port, e.GetBind(), e.GetCaptureMode())
			if port.GetNumber() == 0 {
				if sockets[e.GetBind()] {
					f.errorf(p+".bind", "unix domain sockets of listeners must be unique")
				}
				sockets[e.GetBind()] = true
			} else {
				if ports[port.GetNumber()] {
					f.errorf(p+".port.number", "ports on IP bound listeners must be unique")
				}
				ports[port.GetNumber()] = true
			}
		}
		checkEgressHosts(f, p+".hosts", namespace, e.GetHosts())
	}
}

func checkEgressBind(f *Findings, p string, port *networking.SidecarPort, bind string, mode networking.CaptureMode) {
	if port.GetNumber() == 0 {
		uds, ok := strings.CutPrefix(bind, unixPrefix)
		if !ok {
			f.errorf(p+".bind", "port 0 needs a unix domain socket (unix://<path>)")
		} else {
			checkUnixPath(f, p+".bind", uds)
		}
		if mode != networking.CaptureMode_DEFAULT && mode != networking.CaptureMode_NONE {
			f.errorf(p+".captureMode", "must be DEFAULT or NONE for a unix domain socket")
		}
		return
	}
	f.check(p+".port.number", checkPort(int64(port.GetNumber())))
	if bind != "" && !isIP(bind) {
		f.errorf(p+".bind", "%s is not an IP address", quote(bind))
	}
}

// checkEgressHosts checks "ns/host" hosts as Istio does, with its warnings
// for hosts listed twice or beside "*/*".
func checkEgressHosts(f *Findings, p, namespace string, hosts []string) {
	if len(hosts) == 0 {
		f.errorf(p, "an egress listener needs at least one host")
		return
	}
	byNS := map[string]map[string]bool{}
	for i, h := range hosts {
		ns, name, ok := strings.Cut(h, "/")
		if ok && !strings.HasPrefix(ns, "~") {
			if ns == "." {
				ns = namespace
			}
			if byNS[ns] == nil {
				byNS[ns] = map[string]bool{}
			}
			if (name != "*" && (byNS[ns][name] || byNS[ns]["*"])) || (name == "*" && len(byNS[ns]) > 0) {
				f.warnf(at(p, i), "egress host %s is listed twice", quote(h))
			}
			byNS[ns][name] = true
		}
		f.check(at(p, i), checkEgressHost(h))
	}
	if byNS["*"]["*"] && len(byNS) != 1 {
		f.warnf(p, "*/* selects every host: the others add nothing")
	}
}

// checkEgressHost checks one "ns/host": ns "*", ".", a namespace, any of
// them after "~"; host "*" or a (wildcard) FQDN.
func checkEgressHost(h string) string {
	ns, name, ok := strings.Cut(h, "/")
	if !ok {
		return "host " + quote(h) + " must be namespace/dnsName"
	}
	if ns == "" || name == "" {
		return "host " + quote(h) + ": namespace and name cannot be empty"
	}
	if n := strings.TrimPrefix(ns, "~"); n != "" && n != "*" && n != "." && !isDNSLabel(n) {
		return "host " + quote(h) + ": invalid namespace " + quote(ns)
	}
	if name != "*" && !strings.Contains(name, ".") {
		return "host " + quote(h) + ": short names (not FQDNs) are not allowed"
	}
	if msg := checkWildcardName(name); msg != "" {
		return msg
	}
	return checkPartialWildcard(name)
}

func checkOutboundPolicy(f *Findings, p string, tp *networking.OutboundTrafficPolicy) {
	if tp == nil {
		return
	}
	mode := tp.GetMode()
	if mode == modeAllowAnyDynamicDNS {
		f.errorf(p+".mode", "ALLOW_ANY_DYNAMIC_DNS is for the mesh config only, not a Sidecar")
		return
	}
	if _, ok := networking.OutboundTrafficPolicy_Mode_name[int32(mode)]; !ok {
		f.errorf(p+".mode", "%d is not a mode", int32(mode))
		return
	}
	proxy := tp.GetEgressProxy()
	if proxy == nil {
		return
	}
	if mode != networking.OutboundTrafficPolicy_ALLOW_ANY {
		f.errorf(p+".egressProxy", "only with mode ALLOW_ANY")
		return
	}
	f.check(p+".egressProxy.host", checkDNSName(proxy.GetHost()))
	if proxy.GetPort() == nil {
		f.errorf(p+".egressProxy.port", "must be set")
		return
	}
	checkDestination(f, p+".egressProxy", proxy)
}

// checkConnectionPool checks connection pool settings as Istio's
// validateConnectionPool does.
func checkConnectionPool(f *Findings, p string, cp *networking.ConnectionPoolSettings) {
	if cp == nil {
		return
	}
	if cp.GetHttp() == nil && cp.GetTcp() == nil {
		f.errorf(p, "needs http or tcp settings")
		return
	}
	negative := func(path string, v int32) {
		if v < 0 {
			f.errorf(path, "must not be negative")
		}
	}
	duration := func(path string, d *durationpb.Duration) {
		if d != nil {
			f.check(path, checkDuration(d))
		}
	}
	if h := cp.GetHttp(); h != nil {
		negative(p+".http.http1MaxPendingRequests", h.GetHttp1MaxPendingRequests())
		negative(p+".http.http2MaxRequests", h.GetHttp2MaxRequests())
		negative(p+".http.maxRequestsPerConnection", h.GetMaxRequestsPerConnection())
		negative(p+".http.maxRetries", h.GetMaxRetries())
		negative(p+".http.maxConcurrentStreams", h.GetMaxConcurrentStreams())
		duration(p+".http.idleTimeout", h.GetIdleTimeout())
		if h.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE && h.GetUseClientProtocol() {
			f.errorf(p+".http.useClientProtocol", "must not be true with h2UpgradePolicy UPGRADE")
		}
		if ka := h.GetHttp2KeepAlive(); ka != nil {
			for _, d := range []struct {
				name string
				v    *durationpb.Duration
			}{{"interval", ka.GetInterval()}, {"timeout", ka.GetTimeout()}} {
				if d.v == nil {
					f.errorf(p+".http.http2KeepAlive."+d.name, "required")
				} else {
					duration(p+".http.http2KeepAlive."+d.name, d.v)
				}
			}
		}
	}
	if t := cp.GetTcp(); t != nil {
		negative(p+".tcp.maxConnections", t.GetMaxConnections())
		duration(p+".tcp.connectTimeout", t.GetConnectTimeout())
		duration(p+".tcp.maxConnectionDuration", t.GetMaxConnectionDuration())
		if d := t.GetIdleTimeout(); d != nil && d.AsDuration().Milliseconds() != 0 {
			duration(p+".tcp.idleTimeout", d)
		}
		if ka := t.GetTcpKeepalive(); ka != nil {
			duration(p+".tcp.tcpKeepalive.time", ka.GetTime())
			duration(p+".tcp.tcpKeepalive.interval", ka.GetInterval())
		}
	}
}
