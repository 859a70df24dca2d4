package policy

import (
	"regexp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

const meshGateway = "mesh"

// ValidateVirtualService checks a networking.istio.io VirtualService of
// namespace as Istio's validation does (pkg/config/validation
// ValidateVirtualService and its helpers), and within this package's
// limits: regexes Envoy would refuse, too many hosts or routes. Errors
// refuse it; warnings are Istio's.
func ValidateVirtualService(namespace string, annotations map[string]string, spec *networking.VirtualService) Findings {
	var f Findings
	checkMetadata(&f, annotations)
	hosts := spec.GetHosts()
	if len(hosts) > MaxHosts {
		f.errorf("spec.hosts", "%d hosts, more than %d", len(hosts), MaxHosts)
		return f
	}
	if n := len(spec.GetHttp()) + len(spec.GetTls()) + len(spec.GetTcp()); n > MaxRoutes {
		f.errorf("spec", "%d http, tls and tcp routes, more than %d", n, MaxRoutes)
		return f
	}
	delegate := len(hosts) == 0
	if delegate {
		// A delegate is reached through a root's http route only.
		if len(spec.GetGateways()) > 0 {
			f.errorf("spec.gateways", "a delegate VirtualService (no hosts) cannot name gateways")
		}
		if len(spec.GetTls()) > 0 {
			f.errorf("spec.tls", "a delegate VirtualService (no hosts) cannot have tls routes")
		}
		if len(spec.GetTcp()) > 0 {
			f.errorf("spec.tcp", "a delegate VirtualService (no hosts) cannot have tcp routes")
		}
	}
	gateways := spec.GetGateways()
	checkGatewayNames(&f, "spec.gateways", gateways)
	// Bound to gateways only, unless "mesh" is named or none is.
	toGateway := len(gateways) > 0 && !slices.Contains(gateways, meshGateway)
	toMesh := !toGateway
	if !toGateway {
		for i, r := range spec.GetHttp() {
			for j, m := range r.GetMatch() {
				p := at(at("spec.http", i)+".match", j)
				for _, h := range sortedKeys(m.GetHeaders()) {
					if isClaimHeader(h) {
						f.errorf(key(p+".headers", h), "routing by JWT claim is only for gateways; this VirtualService is bound to the mesh")
					}
				}
				for _, h := range sortedKeys(m.GetWithoutHeaders()) {
					if isClaimHeader(h) {
						f.errorf(key(p+".withoutHeaders", h), "routing by JWT claim is only for gateways; this VirtualService is bound to the mesh")
					}
				}
			}
		}
	}
	valid := true
	sni := hasSNIMatch(spec)
	for i, h := range hosts {
		var msg string
		if toGateway {
			msg = checkGatewayBoundName(sni, h)
		} else {
			msg = checkWildcardName(h)
		}
		switch {
		case msg != "" && !isIP(h):
			f.errorf(at("spec.hosts", i), "%s", msg)
			valid = false
		case msg == "" && toMesh && h == EveryHost:
			f.errorf(at("spec.hosts", i), "%s", everyHostRefused)
			valid = false
		}
	}
	if valid {
		for i := range hosts {
			for j := i + 1; j < len(hosts); j++ {
				if hostsOverlap(hosts[i], hosts[j]) {
					f.errorf(at("spec.hosts", j), "%s overlaps %s: duplicate hosts", quote(hosts[j]), quote(hosts[i]))
				}
			}
		}
	}
	if len(spec.GetHttp()) == 0 && len(spec.GetTcp()) == 0 && len(spec.GetTls()) == 0 {
		f.errorf("spec", "one of http, tcp or tls must be set")
	}
	for i, r := range spec.GetHttp() {
		p := at("spec.http", i)
		if r == nil {
			f.errorf(p, "must not be null")
			continue
		}
		checkHTTPRoute(&f, p, r, delegate)
	}
	for i, r := range spec.GetTls() {
		checkTLSRoute(&f, at("spec.tls", i), r, spec)
	}
	for i, r := range spec.GetTcp() {
		checkTCPRoute(&f, at("spec.tcp", i), r)
	}
	checkExportTo(&f, "spec.exportTo", namespace, spec.GetExportTo())
	warnUnreachable(&f, spec)
	return f
}

// checkGatewayNames checks gateway references: "<namespace>/<name>" of
// DNS labels, or a name that is a DNS name ("mesh", a legacy
// "<name>.<namespace>...", warned about). Stricter than Istio, which
// stops at the first reference without a "/": every one is checked.
func checkGatewayNames(f *Findings, p string, names []string) {
	for i, n := range names {
		ip := at(p, i)
		ns, name, slash := strings.Cut(n, "/")
		if !slash {
			if strings.Contains(n, ".") {
				parts := strings.Split(n, ".")
				f.warnf(ip, "legacy gateway name %s; prefer <namespace>/<name>: %s", quote(n), quote(parts[1]+"/"+parts[0]))
			}
			f.check(ip, checkDNSName(n))
			continue
		}
		if ns == "" || name == "" {
			f.errorf(ip, "namespace and gateway name cannot be empty")
		}
		if !isDNSLabel(ns) {
			f.errorf(ip, "invalid namespace %s", quote(ns))
		}
		if !isDNSLabel(name) {
			f.errorf(ip, "invalid gateway name %s", quote(name))
		}
	}
}

// checkGatewayBoundName checks a host of a VirtualService bound to
// gateways; an SNI host may also be an auto-passthrough name
// (outbound_.<port>_.<subset>_.<host>).
func checkGatewayBoundName(sni bool, h string) string {
	if msg := checkNameLength(h); msg != "" {
		return msg
	}
	if sni && strings.HasPrefix(h, "outbound_") {
		parts := strings.Split(h, "_")
		if len(parts) < 4 {
			return "domain name " + quote(h) + " is not of the form outbound_.<port>_._.<hostname>"
		}
		if port := strings.Trim(parts[1], "."); !hasDigit.MatchString(port) {
			return "domain name " + quote(h) + ": label " + quote(port) + " should be a port"
		}
		if host := strings.Trim(parts[3], "."); !hasLetter.MatchString(host) {
			return "domain name " + quote(h) + ": label " + quote(host) + " should be a host name"
		}
		return ""
	}
	return checkWildcardName(h)
}

var (
	hasDigit  = regexp.MustCompile(`[0-9]`)
	hasLetter = regexp.MustCompile(`[a-zA-Z]`)
)

func hasSNIMatch(vs *networking.VirtualService) bool {
	for _, r := range vs.GetTls() {
		for _, m := range r.GetMatch() {
			if len(m.GetSniHosts()) > 0 {
				return true
			}
		}
	}
	return false
}

// hostsOverlap reports whether some name matches both hosts, each exact
// or a "*" wildcard of its first label(s).
func hostsOverlap(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && bw:
		return strings.HasSuffix(a[1:], b[1:]) || strings.HasSuffix(b[1:], a[1:])
	case aw:
		return strings.HasSuffix(b, a[1:])
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}

// hostWithin reports whether every name host matches is matched by of.
func hostWithin(host, of string) bool {
	hw, ow := strings.HasPrefix(host, "*"), strings.HasPrefix(of, "*")
	switch {
	case hw && ow:
		return len(host) >= len(of) && strings.HasSuffix(host[1:], of[1:])
	case hw:
		return false
	case ow:
		return strings.HasSuffix(host, of[1:])
	}
	return host == of
}

func checkTLSRoute(f *Findings, p string, r *networking.TLSRoute, vs *networking.VirtualService) {
	if r == nil {
		return // as Istio: a null tls route is skipped
	}
	if len(r.GetMatch()) == 0 {
		f.errorf(p+".match", "a tls route needs at least one match")
	}
	if len(r.GetMatch()) > MaxRoutes {
		f.errorf(p+".match", "%d matches, more than %d", len(r.GetMatch()), MaxRoutes)
		return
	}
	for i, m := range r.GetMatch() {
		mp := at(p+".match", i)
		if m == nil {
			f.errorf(mp, "must not be null")
			continue
		}
		if len(m.GetSniHosts()) == 0 {
			f.errorf(mp+".sniHosts", "a tls match needs at least one SNI host")
		}
		for j, h := range m.GetSniHosts() {
			checkSNIHost(f, at(mp+".sniHosts", j), h, vs)
		}
		checkL4(f, mp, m.GetDestinationSubnets(), m.GetPort(), m.GetSourceLabels(), m.GetGateways())
	}
	if len(r.GetRoute()) == 0 {
		f.errorf(p+".route", "a tls route needs a destination")
	}
	checkRouteDestinations(f, p+".route", r.GetRoute())
}

func checkSNIHost(f *Findings, p, h string, vs *networking.VirtualService) {
	var msg string
	if !slices.Contains(vs.GetGateways(), meshGateway) {
		msg = checkGatewayBoundName(true, h)
	} else {
		msg = checkWildcardName(h)
	}
	if msg != "" {
		if isIP(h) {
			f.warnf(p, "an IP address (%s) as SNI goes against the SNI specification; most clients do not send one", quote(h))
			return
		}
		f.errorf(p, "%s", msg)
		return
	}
	for _, host := range vs.GetHosts() {
		if hostWithin(h, host) {
			return
		}
	}
	f.errorf(p, "SNI host %s is not within any of the VirtualService's hosts", quote(h))
}

func checkTCPRoute(f *Findings, p string, r *networking.TCPRoute) {
	if r == nil {
		return // as Istio: a null tcp route is skipped
	}
	if len(r.GetMatch()) > MaxRoutes {
		f.errorf(p+".match", "%d matches, more than %d", len(r.GetMatch()), MaxRoutes)
		return
	}
	for i, m := range r.GetMatch() {
		mp := at(p+".match", i)
		if m == nil {
			f.errorf(mp, "must not be null")
			continue
		}
		checkL4(f, mp, m.GetDestinationSubnets(), m.GetPort(), m.GetSourceLabels(), m.GetGateways())
	}
	if len(r.GetRoute()) == 0 {
		f.errorf(p+".route", "a tcp route needs a destination")
	}
	checkRouteDestinations(f, p+".route", r.GetRoute())
}

func checkL4(f *Findings, p string, subnets []string, port uint32, labels map[string]string, gateways []string) {
	for i, s := range subnets {
		f.check(at(p+".destinationSubnets", i), checkIPOrCIDR(s))
	}
	if port != 0 {
		f.check(p+".port", checkPort(int64(port)))
	}
	checkLabels(f, p+".sourceLabels", labels)
	checkGatewayNames(f, p+".gateways", gateways)
}

func checkRouteDestinations(f *Findings, p string, ds []*networking.RouteDestination) {
	checkWeighted(f, p, ds, nil)
}

// checkWeighted checks the weighted destinations of an HTTP, TLS or TCP
// route, and each with more when given.
func checkWeighted[D interface {
	comparable
	GetDestination() *networking.Destination
	GetWeight() int32
}](f *Findings, p string, ds []D, more func(dp string, d D)) {
	var total int64
	var null D
	for i, d := range ds {
		dp := at(p, i)
		if d == null {
			f.errorf(dp, "must not be null")
			continue
		}
		if d.GetDestination() == nil {
			f.errorf(dp+".destination", "must be set")
		}
		if more != nil {
			more(dp, d)
		}
		checkDestination(f, dp+".destination", d.GetDestination())
		if d.GetWeight() < 0 {
			f.errorf(dp+".weight", "%d is negative", d.GetWeight())
		}
		total += int64(d.GetWeight())
	}
	if len(ds) > 1 && total == 0 {
		f.errorf(p, "the destinations' weights add up to 0")
	}
}

func checkDestination(f *Findings, p string, d *networking.Destination) {
	if d == nil {
		return
	}
	if d.GetHost() == "*" {
		f.errorf(p+".host", "* is not a destination")
	} else {
		f.check(p+".host", checkWildcardName(d.GetHost()))
	}
	if s := d.GetSubset(); s != "" && !isDNSLabel(s) {
		f.errorf(p+".subset", "%s is not a DNS label", quote(s))
	}
	if d.GetPort() != nil {
		f.check(p+".port.number", checkPort(int64(d.GetPort().GetNumber())))
	}
}

// checkExportTo checks exportTo as Istio does for a VirtualService of
// namespace: ".", "*" or namespaces, without duplicates ("." counting as
// namespace), and "*" alone.
func checkExportTo(f *Findings, p, namespace string, exportTo []string) {
	seen := map[string]bool{}
	for i, e := range exportTo {
		k := e
		if e == "." {
			k = namespace
		}
		switch {
		case seen[k]:
			f.errorf(at(p, i), "%s is exported to twice", quote(e))
		case k == "~":
			f.errorf(at(p, i), "~ (no one) is not allowed")
		case k != "*" && k != "." && !isDNSLabel(k):
			f.errorf(at(p, i), "%s is not ., * or a namespace", quote(e))
		default:
			seen[k] = true
		}
	}
	if seen["*"] && len(exportTo) > 1 {
		f.errorf(p, "* (everyone) cannot be listed with other namespaces")
	}
}

// EveryHost is the VirtualService host that names every host.
const EveryHost = "*"

const everyHostRefused = "the wildcard host * is not allowed for a VirtualService bound to the mesh"

// RefusedForSidecars says why sidecars must not apply a VirtualService
// bound to the mesh whatever else it says, "" when they may: a host "*"
// would take the routes of every service (Istio's validation refuses it;
// one that reached the model without the webhook is left out whole).
func RefusedForSidecars(spec *networking.VirtualService) string {
	if slices.Contains(spec.GetHosts(), EveryHost) {
		return everyHostRefused
	}
	return ""
}
