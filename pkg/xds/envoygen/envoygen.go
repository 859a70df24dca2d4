// Package envoygen generates the xDS resources of an Envoy sidecar
// (istio-proxy: pilot-agent in front of Envoy) with Istio's names and
// structure, so the unmodified proxy works:
//
//   - LDS: virtualOutbound (15001) sends what it intercepts to the
//     listener of its original destination port, else to
//     PassthroughCluster (BlackHoleCluster under REGISTRY_ONLY); one
//     outbound listener per service port, not bound ("0.0.0.0_<port>" with
//     RDS for HTTP, "<VIP>_<port>" with tcp_proxy for TCP, and for a port
//     whose protocol is not declared both, the HTTP inspector choosing;
//     "<endpoint IP>_<port>" for a headless service);
//     virtualInbound (15006) with a filter chain per target port of the
//     workload and mTLS mode (HTTP and TCP ones for an undeclared
//     protocol), and passthrough chains for undeclared ports; on HTTP
//     chains, the jwt_authn filter of the workload's
//     RequestAuthentications between the CUSTOM refusal and the other
//     RBAC filters, as Istio orders them.
//   - CDS: "outbound|<port>|<subset>|<fqdn>" EDS clusters whose TLS follows
//     the DestinationRule or auto-mTLS; "inbound|<port>||",
//     InboundPassthroughCluster, PassthroughCluster, BlackHoleCluster.
//   - EDS: the endpoints of each outbound cluster, marked for auto-mTLS.
//   - RDS: per outbound HTTP port, a virtual host per service; per
//     sniffed service listener, "<host>:<port>" to that service alone.
//
// A sidecar's Sidecar resource (model.Snapshot.SidecarFor) scopes all of
// these to the services its egress hosts import, and its
// outboundTrafficPolicy overrides the mesh's (sidecarscope.go).
//
// A router (an Envoy gateway, pilot-agent's "router" mode) gets instead
// what the Gateways selecting it say (gateway.go): "0.0.0.0_<port>"
// listeners on the ports their servers resolve to, a shared chain and
// route "http.<port>" for plaintext HTTP servers, a chain per terminated
// HTTPS server chosen by SNI, with its DownstreamTlsContext
// (gatewaytls.go) and route "https.<port>.<portName>.<gateway>.<ns>";
// the outbound clusters and load assignments a sidecar has, and
// BlackHoleCluster.
//
// Certificates are never sent in these resources: Istio mTLS names the
// secrets "default" and "ROOTCA" that pilot-agent serves over SDS on its
// "sds-grpc" cluster; a DestinationRule's SIMPLE or MUTUAL TLS names
// files pilot-agent serves there ("file-cert:<cert>~<key>",
// "file-root:<ca>") or a credentialName Secret of the client's namespace
// that istiod serves over ADS ("kubernetes://<name>", "-cacert").
package envoygen

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/reqauthn"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// Proxy is what generation needs to know of the requesting sidecar. Two
// proxies with equal fields get equal resources.
type Proxy struct {
	Namespace string
	// Labels select the policies that apply to the workload and the
	// services it serves.
	Labels map[string]string
	// IPs are the workload's addresses; an endpoint at one of them tells
	// the target port of a named service port.
	IPs []string
	// Router is an Envoy gateway (node type "router"): it listens as the
	// Gateways selecting it say (gateway.go), and has the outbound
	// clusters of a sidecar, but no inbound side.
	Router bool
	// Unprivileged is a router whose pod may not bind ports below 1024
	// (node metadata UNPRIVILEGED_POD): servers resolving to them are
	// left out.
	Unprivileged bool
	// Network is the proxy's network (node metadata NETWORK); empty: its
	// workload's topology.istio.io/network label, else unknown.
	Network string
	// NetworkView (node metadata REQUESTED_NETWORK_VIEW) restricts the
	// endpoints it is sent to those of these networks and of none,
	// before any is replaced by its network's gateways, as Istio's
	// endpoint builder; nil: every network.
	NetworkView []string
}

// Mesh is the mesh-wide configuration generation reads.
type Mesh struct {
	// RegistryOnly sends traffic to destinations outside the registry to
	// BlackHoleCluster instead of PassthroughCluster (mesh config
	// outboundTrafficPolicy.mode REGISTRY_ONLY).
	RegistryOnly bool
	// DisableAutoMTLS turns off auto-mTLS (mesh config enableAutoMtls:
	// false): clusters use mTLS only when a DestinationRule says so.
	DisableAutoMTLS bool
	// H2Upgrade upgrades outbound clusters of HTTP/1.1 ports to HTTP/2
	// (mesh config h2UpgradePolicy: UPGRADE) unless a DestinationRule's
	// connectionPool.http.h2UpgradePolicy says otherwise.
	H2Upgrade bool
	// TrustDomainAliases (mesh config trustDomainAliases) are trust
	// domains whose identities AuthorizationPolicy principals match as
	// the mesh's own, and the other way round.
	TrustDomainAliases []string
	// AllowInsecureSkipVerify lets a DestinationRule's SIMPLE or MUTUAL
	// TLS skip verifying the server (insecureSkipVerify: true); without
	// it such a rule is refused. Not part of Istio's mesh config: istiod's
	// operator, not a rule's author, takes that risk.
	AllowInsecureSkipVerify bool
	// AllowLoopbackHTTPJWKS lets a RequestAuthentication's key set be
	// fetched over plain http from a loopback host (its jwksUri, or its
	// issuer's discovery); without it such a rule's issuer gets a key set
	// that rejects every token. Not Istio's either: istiod's operator, not
	// a rule's author, may point istiod at its own loopback ports.
	AllowLoopbackHTTPJWKS bool
	// SidecarIngressTLS terminates the `tls` of a Sidecar's ingress
	// listener on its port (Istio's ENABLE_TLS_ON_SIDECAR_INGRESS, off by
	// default there too); without it such a listener's port is served as
	// without `tls`. Not part of Istio's mesh config either.
	SidecarIngressTLS bool
	// TLSDefaults (mesh config tlsDefaults) are the ECDH curves and
	// cipher suites of a DestinationRule's SIMPLE or MUTUAL TLS, as Istio
	// applies them; empty ones leave Envoy's defaults.
	TLSDefaults TLSDefaults
	// GatewayTopology is mesh config defaultConfig.gatewayTopology, read
	// by routers' HTTP connection managers.
	GatewayTopology GatewayTopology
	// Networks is meshNetworks: the networks and their gateways
	// (model.NetworkGateways, with the Services that expose a network);
	// nil: none but those Services.
	Networks *model.MeshNetworks
	// Routes are the mesh-wide settings of the VirtualService translation
	// (defaultHttpRetryPolicy, defaultVirtualServiceExportTo), read by
	// sidecars' routes and by routers' routes and TCP and TLS chains.
	Routes routes.Options
}

// TLSDefaults are mesh config tlsDefaults.
type TLSDefaults struct {
	ECDHCurves   []string
	CipherSuites []string
	// MinProtocolVersion applies to gateway servers that terminate TLS;
	// TLS_AUTO leaves Envoy's default.
	MinProtocolVersion tlsv3.TlsParameters_TlsProtocol
}

// GatewayTopology is how a router's clients reach it.
type GatewayTopology struct {
	// NumTrustedProxies is how many proxies in front of the router append
	// to X-Forwarded-For: the client's address is that many entries from
	// the end.
	NumTrustedProxies uint32
	// ForwardClientCertDetails is how x-forwarded-client-cert is treated;
	// nil is Istio's default for gateways, SANITIZE_SET.
	ForwardClientCertDetails *hcm.HttpConnectionManager_ForwardClientCertDetails
	// ProxyProtocol: clients speak the PROXY protocol first.
	ProxyProtocol bool
}

// Generator generates resources for Envoy sidecars.
type Generator struct {
	TrustDomain spiffeid.TrustDomain
	Mesh        Mesh
	// ScopeGatewayToNamespace applies to a router only the Gateways of its
	// own namespace (Istio's PILOT_SCOPE_GATEWAY_TO_NAMESPACE); otherwise
	// those of every namespace whose selector matches it.
	ScopeGatewayToNamespace bool
	// Keys are the RequestAuthentication key sets istiod fetched, inlined
	// in jwt_authn; nil (or a key set not held) gives the issuer's
	// provider a key set that rejects every token.
	Keys reqauthn.Keys
	// Telemetry is the standard telemetry of every proxy (telemetry.go),
	// which the Telemetries selecting a proxy change (telemetryapi.go);
	// nil adds none.
	Telemetry *Telemetry

	// memo keeps routers' route configurations per snapshot; vsMemo the
	// VirtualServices' translations on gateway servers across snapshots,
	// meshMemo those on sidecars' ports.
	memo     routeMemo
	vsMemo   routes.Memo
	meshMemo routes.Memo
	// valid keeps which Telemetries validation admits.
	valid validTelemetries
}

// Generate returns the resources of typeURL that p asked for in names
// (everything it may see when wildcard). Names that do not exist are left
// out. Unknown type URLs give nothing.
func (g *Generator) Generate(snap *model.Snapshot, p *Proxy, typeURL string, names []string, wildcard bool) []resource.Resource {
	b := &builder{g: g, snap: snap, p: p, tel: g.Telemetry}
	if typeURL == resource.ListenerType {
		b.tel = g.TelemetryFor(snap, p.Namespace, p.Labels)
	}
	var out []resource.Resource
	switch {
	case p.Router:
		out = b.routerResources(typeURL, names, wildcard)
		if out == nil {
			return nil
		}
	default:
		out = b.sidecarResources(typeURL, names, wildcard)
		if out == nil {
			return nil
		}
	}
	// Where ServiceEntries of several namespaces name one host, which
	// one the proxy sees is part of every resource's content.
	if choices := snap.HostChoices(p.Namespace); len(choices) > 0 {
		salt := key(append([]string{"hosts"}, choices...)...)
		for i := range out {
			out[i].Key += salt
		}
	}
	slices.SortFunc(out, func(x, y resource.Resource) int { return strings.Compare(x.Name, y.Name) })
	if wildcard {
		return out
	}
	// Named requests get what exists of what they ask for.
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	return slices.DeleteFunc(out, func(r resource.Resource) bool { return !want[r.Name] })
}

// sidecarResources are the resources of typeURL of a sidecar, those named
// and maybe more; nil for an unknown type.
func (b *builder) sidecarResources(typeURL string, names []string, wildcard bool) []resource.Resource {
	out := []resource.Resource{}
	switch typeURL {
	case resource.ClusterType:
		if !wildcard && !slices.ContainsFunc(names, func(n string) bool { return resource.ClusterHost(n) == "" && !isInboundClusterName(n) }) {
			// Outbound ones, what a service changes, and inbound ones,
			// whose pool a DestinationRule sets (DestinationRuleNames):
			// not the whole set for a few names.
			out = b.namedClusters(names)
			if slices.ContainsFunc(names, isInboundClusterName) {
				out = append(out, b.inboundClusters()...)
			}
			break
		}
		out = b.clusters()
	case resource.ListenerType:
		if !wildcard && len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool { return n != virtualInbound }) {
			out = []resource.Resource{b.inboundListener()} // what authorization changes
			break
		}
		if !wildcard && !slices.Contains(names, virtualInbound) && !slices.Contains(names, virtualOutbound) {
			out = b.namedOutboundListeners(names) // what a service changes
			break
		}
		out = b.listeners()
	case resource.RouteType:
		out = b.routes(wildcard || slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, ":") }))
	case resource.EndpointType:
		if !wildcard {
			out = b.namedEndpoints(slices.Compact(slices.Sorted(slices.Values(names))))
			break
		}
		out = b.endpoints()
	default:
		return nil
	}
	return out
}

// Scope is what generation reads of p in snap, as one string: proxies
// with equal scopes get equal resources. The namespace decides which
// services the proxy sees (their exportTo) and, with the labels, which
// DestinationRule applies to each and which Sidecar scopes it (whose key
// is part of the scope, so that a Sidecar's change changes the scope of
// the proxies it configures, and only theirs). The proxy's addresses count only
// through the target ports they resolve, and, for an endpoint of a
// headless service, through the listener to itself that it lacks; so the
// replicas of one workload share a scope unless a headless service
// selects them.
func (g *Generator) Scope(snap *model.Snapshot, p *Proxy) string {
	b := &builder{g: g, snap: snap, p: p}
	if p.Router {
		if p.Network != "" {
			return "router|" + b.routerScope() + string(appendPart([]byte("|net|"), p.Network)) + p.viewKey()
		}
		return "router|" + b.routerScope() + p.viewKey()
	}
	var out []byte
	out = appendPart(out, p.Namespace)
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		out = appendPart(appendPart(out, k), p.Labels[k])
	}
	out = append(out, '|')
	for _, t := range b.inboundTargets() {
		out = appendPart(out, t.scopePart())
	}
	// The clusters of its Sidecar's ingress listeners to its own address.
	if s := b.ingressScope(b.ingressListeners()); s != "" {
		out = appendPart(append(out, "|ingress|"...), s)
	}
	// An endpoint of a headless service has no outbound listener to its
	// own address, which its peers have.
	if b.selfIsHeadlessEndpoint() {
		out = appendPart(append(out, '|'), b.selfAddress())
	}
	// DNS clusters of ServiceEntries resolve the proxy's IP families.
	if len(snap.ServiceEntries()) > 0 {
		out = appendPart(append(out, '|'), b.dnsLookupFamily().String())
	}
	// The Sidecar configuring it, content and all.
	if k := b.sidecarKey(); k != "" {
		out = appendPart(append(out, "|sidecar|"...), k)
	}
	if p.Network != "" {
		out = appendPart(append(out, "|net|"...), p.Network)
	}
	return string(out) + p.viewKey()
}

// EndpointScope is what load assignments read of p in snap, as one
// string: proxies with equal endpoint scopes get equal load assignments,
// whatever their other resources. Load assignments read the proxy's
// namespace (which services it sees, which DestinationRule applies to it,
// whether its rule may name a credential) and, only when a DestinationRule
// selects clients by their labels, its labels.
func (g *Generator) EndpointScope(snap *model.Snapshot, p *Proxy) string {
	out := appendPart([]byte("eds|"), p.Namespace)
	if p.Router {
		// A router has the load assignments of headless services too.
		out = append(out, "router|"...)
	}
	if snap.SelectsClients() {
		for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
			out = appendPart(appendPart(out, k), p.Labels[k])
		}
	}
	// Which clusters it has: its Sidecar's.
	if !p.Router {
		if sc := snap.SidecarFor(p.Namespace, p.Labels); sc != nil {
			out = appendPart(append(out, "|sidecar|"...), sc.Key())
		}
	}
	// Which endpoints it reaches directly, and which through gateways.
	if net := (&builder{p: p}).network(); net != "" {
		out = appendPart(append(out, "|net|"...), net)
	}
	return string(out) + p.viewKey()
}

func appendPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	return append(append(b, ':'), s...)
}

// builder generates for one snapshot and proxy.
type builder struct {
	g       *Generator
	tel     *Telemetry // the proxy's: the Telemetries selecting it merged in
	snap    *model.Snapshot
	p       *Proxy
	targets *[]inboundTarget // inboundTargets, once computed
	gw      *mergedGateway   // merged, once computed

	egressOnce sync.Once
	scope      *egressScope // egress, once computed

	l4Once sync.Once
	l4VS   []routes.L4VirtualService // meshL4's, once computed

	mu         sync.Mutex
	identities map[*model.Service][]string // serviceIdentities, once per service
}

// services are the services the proxy sees, sorted by hostname: those
// its namespace sees (their exportTo) and its Sidecar imports
// (sidecarscope.go); those it has outbound clusters, listeners and routes
// for.
func (b *builder) services() []*model.Service { return b.egress().services }

// listenerServices are the services the proxy has listeners and virtual
// hosts for, sorted by hostname: those its Sidecar's egress hosts name
// (without the destinations of its VirtualServices, which have clusters
// alone), or, without a Sidecar, services().
func (b *builder) listenerServices() []*model.Service { return b.egress().listed }

// telemetryKey is key(parts...) for a resource carrying t's telemetry:
// the scope of t is part of it when Telemetries configure it.
func telemetryKey(t *Telemetry, parts ...string) string {
	if k := t.Key(); k != "" {
		return joinKey(parts, k, true)
	}
	return joinKey(parts, "", false)
}

// key is a resource's content key: the envoygen namespace, then each part
// length-prefixed so that no two part lists share a key.
func key(parts ...string) string { return joinKey(parts, "", false) }

// joinKey is key(parts...), and of last too when withLast, written in
// one allocation: every resource of every push has a key.
func joinKey(parts []string, last string, withLast bool) string {
	const prefix = "envoy"
	n := len(prefix)
	for _, p := range parts {
		n += partSize(p)
	}
	if withLast {
		n += partSize(last)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(prefix)
	var digits [20]byte
	write := func(p string) {
		b.WriteByte('|')
		b.Write(strconv.AppendInt(digits[:0], int64(len(p)), 10))
		b.WriteByte(':')
		b.WriteString(p)
	}
	for _, p := range parts {
		write(p)
	}
	if withLast {
		write(last)
	}
	return b.String()
}

// partSize is the length of p's part of a key: '|', its length in
// decimal, ':' and p.
func partSize(p string) int {
	n := 3 // '|', ':' and the length's first digit
	for l := len(p); l >= 10; l /= 10 {
		n++
	}
	return n + len(p)
}
