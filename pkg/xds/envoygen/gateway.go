package envoygen

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// Bounds on what one Gateway server may make a router generate.
const (
	maxServerHosts = 1000
	// maxHostLen is a namespace, "/" and a DNS name.
	maxHostLen = 63 + 1 + 253
)

// GatewayProblem is a Gateway server a router does not serve, and why.
// Other servers of the same and other Gateways keep serving.
type GatewayProblem struct {
	Namespace, Name string // the Gateway's
	Port            uint32 // the server's port number
	Reason          string
}

func (p GatewayProblem) String() string {
	return fmt.Sprintf("gateway %s/%s server on port %d: %s", p.Namespace, p.Name, p.Port, p.Reason)
}

// Why a server is not served. Kind is the metric's reason label.
const (
	ProblemConflict    = "conflict"    // another server already takes its port or SNI
	ProblemUnsupported = "unsupported" // a feature not served (bind)
	ProblemInvalid     = "invalid"     // a server Istio's validation refuses
	ProblemRefused     = "refused"     // insecureSkipVerify without the operator's consent
)

// ProblemKind is the kind of p (one of the Problem constants).
func (p GatewayProblem) Kind() string {
	kind, _, _ := strings.Cut(p.Reason, ":")
	return kind
}

// serverKind is how a router's listener treats a port.
type serverKind int

const (
	kindHTTP serverKind = iota // plaintext HTTP servers: one chain, one route
	kindTLS                    // servers with TLS: a chain per server, told apart by SNI
	kindTCP                    // one opaque TCP server
)

func (k serverKind) String() string {
	return [...]string{"plaintext HTTP", "TLS", "TCP"}[k]
}

// gwServer is one server of a Gateway that a router serves on one port.
type gwServer struct {
	gw     *model.Gateway
	server *networkingv1.Server // as the Gateway says it
	port   uint32               // the listener's port: the targetPort it resolves to
	kind   serverKind
	// sni are the server's hosts without namespace, sorted and unique;
	// nil when one is "*" (the chain then takes any SNI, and none).
	sni   []string
	route string // the RDS route of an HTTP or terminated HTTPS server; "" for others
	// tls is the DownstreamTlsContext of a server that terminates TLS.
	tls *tlsv3.DownstreamTlsContext
	// l4 are the VirtualService routes of a server that is not HTTP: a
	// chain each (by SNI) for PASSTHROUGH, at most one for TCP, with or
	// without TLS termination.
	l4 []routes.L4Route
}

// terminatesHTTPS reports whether the server ends TLS and speaks HTTP
// inside: an HTTPS server whose TLS mode is not passthrough.
func (s *gwServer) terminatesHTTPS() bool {
	return s.kind == kindTLS && gatewayProtocol(s.server.GetPort().GetProtocol()) == "HTTPS" && !passthrough(s.server)
}

// gwListener is the servers of one listener port, in the order they apply.
type gwListener struct {
	port    uint32
	kind    serverKind
	servers []*gwServer
	taken   map[string]*gwServer // TLS: by SNI name ("*" for none)
}

// mergedGateway is what the Gateways selecting a router make of it.
type mergedGateway struct {
	listeners []*gwListener // by port
	routes    map[string][]*gwServer
	problems  []GatewayProblem
	// routeProblems are the parts of VirtualServices the TCP and TLS
	// chains leave out.
	routeProblems []routes.Problem
}

// gateways are the Gateways that apply to the router, in the order in
// which their servers claim ports and SNI names (model's GatewaysFor:
// Istio's selection and order).
func (b *builder) gateways() []*model.Gateway {
	return slices.DeleteFunc(b.snap.GatewaysFor(b.p.Namespace, b.p.Labels, b.g.ScopeGatewayToNamespace),
		func(gw *model.Gateway) bool { return gw.Spec == nil })
}

// resolvePort is the port a router listens on for a server port: the
// targetPort of the first port of a Service selecting the router that
// has that number, else the number itself (Istio's resolvePorts for
// Gateways that select by label).
func (b *builder) resolvePort(number uint32) uint32 {
	for _, svc := range b.snap.Services() {
		if !b.selectsProxy(svc) {
			continue
		}
		for _, sp := range svc.Ports {
			if sp.Port != number {
				continue
			}
			if t := b.targetPort(svc, sp); t != 0 {
				return t
			}
		}
	}
	return number
}

// selectsProxy reports whether svc selects the proxy's workload.
func (b *builder) selectsProxy(svc *model.Service) bool {
	return svc.Namespace == b.p.Namespace && len(svc.Selector) > 0 && model.Matches(svc.Selector, b.p.Labels)
}

// merged merges the router's Gateways, once per builder.
func (b *builder) merged() *mergedGateway {
	if b.gw != nil {
		return b.gw
	}
	m := &mergedGateway{routes: map[string][]*gwServer{}}
	byPort := map[uint32]*gwListener{}
	for _, gw := range b.gateways() {
		for _, srv := range gw.Spec.GetServers() {
			s, problem := b.gatewayServer(gw, srv)
			if problem == "" && s == nil {
				continue // a port the proxy may not bind
			}
			if problem == "" {
				problem = m.add(byPort, s)
			}
			if problem != "" {
				m.problems = append(m.problems, GatewayProblem{Namespace: gw.Namespace, Name: gw.Name, Port: srv.GetPort().GetNumber(), Reason: problem})
			}
		}
	}
	m.listeners = slices.SortedFunc(maps.Values(byPort), func(x, y *gwListener) int { return cmp.Compare(x.port, y.port) })
	for _, l := range m.listeners {
		m.routeProblems = append(m.routeProblems, b.l4Routes(l)...)
	}
	b.gw = m
	return m
}

// gatewayServer reads one server of gw; nil without a problem when its
// port is one the proxy may not bind.
func (b *builder) gatewayServer(gw *model.Gateway, srv *networkingv1.Server) (*gwServer, string) {
	port := srv.GetPort()
	// Every string of the server may reach Envoy: one that is not UTF-8
	// would keep the whole listener from being marshalled.
	if _, err := proto.Marshal(srv); err != nil {
		return nil, fmt.Sprintf("%s: %v", ProblemInvalid, err)
	}
	switch {
	case port == nil || port.GetNumber() == 0 || port.GetNumber() > 65535:
		return nil, ProblemInvalid + ": no valid port"
	case len(srv.GetHosts()) == 0:
		return nil, ProblemInvalid + ": no hosts"
	case len(srv.GetHosts()) > maxServerHosts:
		return nil, fmt.Sprintf("%s: %d hosts, limit %d", ProblemInvalid, len(srv.GetHosts()), maxServerHosts)
	case srv.GetBind() != "":
		return nil, ProblemUnsupported + ": bind is not served"
	}
	for _, h := range srv.GetHosts() {
		if len(h) > maxHostLen || !validServerHost(h) {
			return nil, fmt.Sprintf("%s: host %q is not [<namespace>/]<DNS name>, * or *.<DNS name>", ProblemInvalid, truncateName(h))
		}
	}
	s := &gwServer{gw: gw, server: srv, port: b.resolvePort(port.GetNumber())}
	if b.p.Unprivileged && s.port < 1024 {
		return nil, ""
	}
	proto := gatewayProtocol(port.GetProtocol())
	tls := srv.GetTls()
	switch {
	case httpProtocol(proto):
		s.kind = kindHTTP
		s.route = "http." + strconv.FormatUint(uint64(s.port), 10)
	case tls != nil:
		s.kind = kindTLS
	case proto == "HTTPS" || proto == "TLS":
		return nil, ProblemInvalid + ": " + proto + " server without tls"
	default:
		s.kind = kindTCP
	}
	if tls != nil {
		s.sni = sniHosts(srv.GetHosts())
	}
	if s.terminatesHTTPS() {
		if port.GetName() == "" {
			return nil, ProblemInvalid + ": HTTPS server without port name"
		}
		s.route = "https." + strconv.FormatUint(uint64(port.GetNumber()), 10) + "." + port.GetName() + "." + gw.Name + "." + gw.Namespace
	}
	if s.kind == kindTLS && !passthrough(srv) {
		if ns := foreignCredential(tls, b.p.Namespace); ns != "" {
			return nil, fmt.Sprintf("%s: credentialName names a Secret of namespace %q; a gateway reads those of its own, %q", ProblemRefused, truncateName(ns), b.p.Namespace)
		}
		if err := checkServerTLS(tls, b.g.Mesh); err != nil {
			return nil, err.Error()
		}
		// What Envoy would refuse (a malformed SPKI pin or certificate
		// hash, say) is not sent: Envoy would refuse the whole listener.
		s.tls = gatewayTLSContext(tls, !s.terminatesHTTPS(), b.g.Mesh.TLSDefaults)
		if err := s.tls.ValidateAll(); err != nil {
			return nil, fmt.Sprintf("%s: tls: %v", ProblemInvalid, err)
		}
	}
	return s, ""
}

// add adds s to the listener of its port, or reports why not: a port
// takes servers of one kind, a TLS server's SNI names must not be taken
// (Envoy refuses a listener whose chains match the same), an opaque TCP
// port takes one server, and a route belongs to one port.
func (m *mergedGateway) add(byPort map[uint32]*gwListener, s *gwServer) string {
	l := byPort[s.port]
	if l == nil {
		l = &gwListener{port: s.port, kind: s.kind, taken: map[string]*gwServer{}}
		byPort[s.port] = l
	}
	if l.kind != s.kind {
		return fmt.Sprintf("%s: port %d already serves %s", ProblemConflict, s.port, l.kind)
	}
	if s.kind == kindTCP && len(l.servers) > 0 {
		return fmt.Sprintf("%s: port %d already serves TCP", ProblemConflict, s.port)
	}
	if s.server.GetTls() != nil {
		names := s.sni
		if names == nil {
			names = []string{"*"}
		}
		var dup []string
		for _, n := range names {
			if other := l.taken[n]; other != nil {
				dup = append(dup, n+" (gateway "+other.gw.Namespace+"/"+other.gw.Name+")")
			}
		}
		if len(dup) > 0 {
			return fmt.Sprintf("%s: port %d already serves %s", ProblemConflict, s.port, strings.Join(dup, ", "))
		}
	}
	if s.route != "" && s.kind != kindHTTP && len(m.routes[s.route]) > 0 {
		return fmt.Sprintf("%s: route %s already served", ProblemConflict, s.route)
	}
	if s.server.GetTls() != nil {
		names := s.sni
		if names == nil {
			names = []string{"*"}
		}
		for _, n := range names {
			l.taken[n] = s
		}
	}
	l.servers = append(l.servers, s)
	if s.route != "" {
		m.routes[s.route] = append(m.routes[s.route], s)
	}
	return ""
}

// GatewayProblems are the servers of the Gateways selecting the router p
// that it is not served, and why.
func (g *Generator) GatewayProblems(snap *model.Snapshot, p *Proxy) []GatewayProblem {
	if !p.Router {
		return nil
	}
	b := &builder{g: g, snap: snap, p: p}
	return b.merged().problems
}

// sniHosts are a server's hosts as SNI names: without their namespace
// part, lower-cased, sorted and unique; nil when one is "*".
func sniHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if _, name, ok := strings.Cut(h, "/"); ok {
			h = name
		}
		h = strings.ToLower(h)
		if h == "*" {
			return nil
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// gatewayProtocol is a server port's protocol, upper-cased, as Istio
// parses it.
func gatewayProtocol(p string) string { return strings.ToUpper(p) }

// httpProtocol reports whether a server protocol is plaintext HTTP.
func httpProtocol(p string) bool {
	switch p {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB", "HTTP_PROXY":
		return true
	}
	return false
}

func passthrough(srv *networkingv1.Server) bool {
	m := srv.GetTls().GetMode()
	return srv.GetTls() != nil && (m == networkingv1.ServerTLSSettings_PASSTHROUGH || m == networkingv1.ServerTLSSettings_AUTO_PASSTHROUGH)
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// foreignCredential is the namespace other than ns that a credentialName
// of s names ("[kubernetes://]<namespace>/<name>"), or "". Such a Secret
// is never served to the router (Istio's CVE-2021-34824), so the server
// is not either: its chain would wait for it.
func foreignCredential(s *networkingv1.ServerTLSSettings, ns string) string {
	for _, c := range append(slices.Clone(s.GetCredentialNames()), s.GetCredentialName(), s.GetCaCertCredentialName()) {
		rest := strings.TrimPrefix(c, credentialPrefix)
		if strings.Contains(rest, "://") {
			continue // another kind of credential: checkServerTLS refuses it
		}
		if other, _, ok := strings.Cut(rest, "/"); ok && other != ns {
			return other
		}
	}
	return ""
}

// validServerHost reports whether h is a server host as Istio's
// validation admits it: "[<namespace>|.|*]/" then "*" or a DNS name
// whose first label may start with "*".
func validServerHost(h string) bool {
	if ns, name, ok := strings.Cut(h, "/"); ok {
		if ns != "." && ns != "*" && !dnsLabel(ns, false) {
			return false
		}
		h = name
	}
	if h == "" || len(h) > 255 {
		return false
	}
	first, rest, more := strings.Cut(h, ".")
	if !dnsLabel(first, true) {
		return false
	}
	if !more {
		return true
	}
	labels := strings.Split(rest, ".")
	if labels[len(labels)-1] == "" { // a trailing dot
		labels = labels[:len(labels)-1]
	}
	if len(labels) == 0 {
		return false
	}
	if _, err := strconv.Atoi(labels[len(labels)-1]); err == nil {
		return false // an all-numeric top-level domain
	}
	for _, l := range labels {
		if !dnsLabel(l, false) {
			return false
		}
	}
	return true
}

// dnsLabel reports whether l is an RFC 1123 label; with wildcard, also
// "*" or a label starting with "*" or "*-".
func dnsLabel(l string, wildcard bool) bool {
	if wildcard && l == "*" {
		return true
	}
	if rest, ok := strings.CutPrefix(l, "*"); wildcard && ok {
		l = strings.TrimPrefix(rest, "-")
	}
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, r := range l {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
