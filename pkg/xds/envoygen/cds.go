package envoygen

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	rawbuffer "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// Names of the clusters every sidecar has.
const (
	passthroughCluster        = "PassthroughCluster"
	blackholeCluster          = "BlackHoleCluster"
	inboundPassthroughCluster = "InboundPassthroughCluster"
	// inboundBindAddress is the source address of connections to the
	// application: istio-iptables lets it through instead of sending it
	// back to Envoy.
	inboundBindAddress = "127.0.0.6"
)

// outboundCluster is one "outbound|<port>|<subset>|<host>" cluster.
type outboundCluster struct {
	name   string
	svc    *model.Service
	port   model.Port
	subset *networkingv1.Subset // nil for the service's own cluster
	dr     *model.DestinationRule
	router bool // a router's: a headless service's is an EDS cluster
	// sniDNAT is a router's SNI-DNAT cluster "outbound_.<port>_.<subset>_.<host>"
	// of an AUTO_PASSTHROUGH server (eastwest.go): plaintext, as the
	// client's mTLS passes through it.
	sniDNAT bool
}

// outboundClusters lists every outbound cluster the proxy sees: each TCP
// or HTTP service port, and each subset of its DestinationRule.
func (b *builder) outboundClusters() []outboundCluster {
	ports := 0 // the clusters but subsets' (grown into when there are)
	for _, svc := range b.services() {
		ports += len(svc.Ports)
	}
	out := make([]outboundCluster, 0, ports)
	for _, svc := range b.services() {
		dr := b.snap.DestinationRuleFor(svc.Hostname, b.p.Namespace, b.p.Labels)
		for _, port := range svc.Ports {
			if protocolOf(port) == protoUDP {
				continue
			}
			out = append(out, outboundCluster{name: resource.ClusterName(svc.Hostname, "", port.Port), svc: svc, port: port, dr: dr, router: b.p.Router})
			for _, ss := range dr.GetSpec().GetSubsets() {
				if ss.GetName() == "" {
					continue
				}
				out = append(out, outboundCluster{
					name: resource.ClusterName(svc.Hostname, ss.GetName(), port.Port), svc: svc, port: port, subset: ss, dr: dr, router: b.p.Router,
				})
			}
		}
	}
	return out
}

// outboundClusterNamed is the outbound cluster of that name the proxy
// sees, as outboundClusters lists it.
func (b *builder) outboundClusterNamed(name string) (outboundCluster, bool) {
	host, subset, port, ok := resource.ParseClusterName(name)
	sniDNAT := false
	if !ok {
		host, subset, port, ok = resource.ParseSNIClusterName(name)
		if !ok || !b.autoPassthrough() {
			return outboundCluster{}, false
		}
		sniDNAT = true
	}
	svc := b.service(host)
	if svc == nil {
		return outboundCluster{}, false
	}
	i := slices.IndexFunc(svc.Ports, func(p model.Port) bool { return p.Port == port && protocolOf(p) != protoUDP })
	if i < 0 {
		return outboundCluster{}, false
	}
	dr := b.snap.DestinationRuleFor(svc.Hostname, b.p.Namespace, b.p.Labels)
	oc := outboundCluster{name: name, svc: svc, port: svc.Ports[i], dr: dr, router: b.p.Router, sniDNAT: sniDNAT}
	if sniDNAT && !sniDNATService(svc) {
		return outboundCluster{}, false
	}
	if subset == "" {
		return oc, true
	}
	for _, ss := range dr.GetSpec().GetSubsets() {
		if ss.GetName() == subset {
			oc.subset = ss
			return oc, true
		}
	}
	return outboundCluster{}, false
}

func (b *builder) clusters() []resource.Resource {
	var out []resource.Resource
	for _, oc := range b.outboundClusters() {
		out = append(out, b.outboundClusterResource(oc))
	}
	out = append(out, b.inboundClusters()...)
	out = append(out,
		resource.Resource{Name: passthroughCluster, Key: key("cds", passthroughCluster), Build: func() (proto.Message, error) {
			return passthroughProtocol(originalDst(passthroughCluster, false))
		}},
		resource.Resource{Name: inboundPassthroughCluster, Key: key("cds", inboundPassthroughCluster), Build: func() (proto.Message, error) {
			return passthroughProtocol(originalDst(inboundPassthroughCluster, true))
		}},
		blackholeClusterResource(),
	)
	return out
}

// blackholeClusterResource is BlackHoleCluster, which has no endpoints:
// what goes to it is dropped.
func blackholeClusterResource() resource.Resource {
	return resource.Resource{Name: blackholeCluster, Key: key("cds", blackholeCluster), Build: func() (proto.Message, error) {
		return &cluster.Cluster{
			Name:                 blackholeCluster,
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
			ConnectTimeout:       connectTimeout,
		}, nil
	}}
}

func inboundClusterName(port uint32) string {
	var digits [20]byte // a concatenation allocates once
	return inboundClusterPrefix + string(strconv.AppendUint(digits[:0], uint64(port), 10)) + "||"
}

const inboundClusterPrefix = "inbound|"

// isInboundClusterName reports whether name is that of an inbound
// cluster "inbound|<port>||" (inboundClusters).
func isInboundClusterName(name string) bool { return strings.HasPrefix(name, inboundClusterPrefix) }

// originalDst is a cluster to the connection's original destination;
// bound to 127.0.0.6 when it leads to the local application.
func originalDst(name string, inbound bool) *cluster.Cluster {
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		ConnectTimeout:       connectTimeout,
		LbPolicy:             cluster.Cluster_CLUSTER_PROVIDED,
		CircuitBreakers:      unlimited(),
	}
	if inbound {
		c.UpstreamBindConfig = &core.BindConfig{SourceAddress: &core.SocketAddress{
			Address: inboundBindAddress, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 0},
		}}
	} else {
		c.Filters, _ = clusterFilters() // constant fields always marshal
	}
	return c
}

// withDownstreamProtocol makes a passthrough cluster speak HTTP upstream
// as the client spoke it downstream.
func withDownstreamProtocol(c *cluster.Cluster) (proto.Message, error) {
	opts, err := anypb.New(&httpopts.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &httpopts.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions:  &core.Http1ProtocolOptions{},
				Http2ProtocolOptions: &core.Http2ProtocolOptions{},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: opts}
	return c, nil
}

const httpOptionsName = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// unlimited are Istio's default circuit breakers: none.
func unlimited() *cluster.CircuitBreakers {
	maxU32 := wrapperspb.UInt32(math.MaxUint32)
	return &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
		MaxConnections: maxU32, MaxPendingRequests: maxU32, MaxRequests: maxU32, MaxRetries: maxU32,
	}}}
}

// clusterTLS is how a client reaches the endpoints of a cluster.
type clusterTLS int

const (
	tlsAuto      clusterTLS = iota // mTLS to endpoints marked tlsMode=istio, plaintext to the rest
	tlsMutual                      // ISTIO_MUTUAL to every endpoint
	tlsPlain                       // no TLS
	tlsOriginate                   // the rule's SIMPLE or MUTUAL TLS to every endpoint
	tlsRefused                     // TLS settings that cannot be applied: no endpoints, so nothing leaks in plaintext
)

// tlsOf decides a cluster's TLS from its DestinationRule, else auto-mTLS.
func (b *builder) tlsOf(oc outboundCluster) clusterTLS {
	settings := oc.tlsSettings()
	switch {
	case settings == nil:
	case settings.GetMode() == networkingv1.ClientTLSSettings_ISTIO_MUTUAL:
		return tlsMutual
	case settings.GetMode() == networkingv1.ClientTLSSettings_DISABLE:
		return tlsPlain
	default: // SIMPLE, MUTUAL: never replaced by auto-mTLS
		if b.originationProblem(oc, settings) != nil {
			return tlsRefused
		}
		return tlsOriginate
	}
	if b.g.Mesh.DisableAutoMTLS || oc.external() {
		return tlsPlain // auto-mTLS never applies outside the mesh
	}
	return tlsAuto
}

// tlsSettings is the cluster's DestinationRule TLS as Istio merges it: the
// subset's port-level setting, the subset's, the rule's port-level, the
// rule's; nil when the rule does not say.
func (oc outboundCluster) tlsSettings() *networkingv1.ClientTLSSettings {
	return policy.ClientTLS(oc.dr.GetSpec(), oc.subset, oc.port.Port)
}

func (b *builder) outboundClusterResource(oc outboundCluster) resource.Resource {
	r := b.outboundEDSCluster(oc)
	if t, ok := oc.dnsType(); ok {
		return b.dnsCluster(r, oc, t) // a ServiceEntry's (entry.go)
	}
	return r
}

// outboundEDSCluster is oc's cluster as an EDS one, or, for a headless
// service, an ORIGINAL_DST one.
func (b *builder) outboundEDSCluster(oc outboundCluster) resource.Resource {
	mode := b.tlsOf(oc)
	if oc.sniDNAT {
		mode = tlsPlain // the client's mTLS passes through
	}
	subset := oc.subset.GetName()
	pool := oc.connectionPool()
	upstream := b.upstreamOf(oc, pool)
	h2 := upstream == upstreamH2
	name := oc.name
	shape := "" // a headless service's cluster is EDS for routers alone
	if oc.svc.Headless && oc.router {
		shape = "router"
	}
	pk, err := poolKey(pool)
	if err != nil {
		return resource.Resource{Name: name, Key: key("cds", name), Encode: func() ([]byte, error) { return nil, fmt.Errorf("cluster %s: %w", name, err) }}
	}
	k := key("cds", name, strconv.Itoa(int(mode)), shape, strconv.Itoa(int(upstream)), pk)
	if mode == tlsOriginate {
		// The rule's settings are the cluster's content.
		settings := oc.tlsSettings()
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(settings)
		if err != nil {
			return resource.Resource{Name: name, Key: k, Encode: func() ([]byte, error) { return nil, fmt.Errorf("cluster %s: %w", name, err) }}
		}
		return resource.Resource{Name: name, Key: key("cds", name, strconv.Itoa(int(mode)), shape, strconv.Itoa(int(upstream)), pk, string(raw)), Encode: func() ([]byte, error) {
			return b.originationCluster(oc, settings, upstream)
		}}
	}
	return resource.Resource{Name: name, Key: k, Encode: func() ([]byte, error) {
		if mode == tlsRefused || oc.headless() && !oc.sniDNAT {
			return b.otherCluster(oc, mode, upstream)
		}
		shapes, err := edsClusterShapes()
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", name, err)
		}
		// The fields every such cluster shares were marshalled once; what
		// is the cluster's own follows them.
		sans, serverName := b.serviceIdentities(oc.svc), sni(oc.svc.Hostname, subset, oc.port.Port)
		shape := shapes[upstream]
		if pool != nil {
			if shape, err = pooledShape(upstream, pool); err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
		}
		w := append(make(wire, 0, len(shape)+2*len(name)+upstreamMTLSSize(sans, serverName)+len(plaintextSocketMatchWire())+64), shape...)
		w = w.str(clusterName, name)
		w, eds := w.open(clusterEDSConfig)
		w = w.str(edsServiceName, name).close(eds)
		var ts, m int
		switch mode {
		case tlsMutual:
			w, ts = w.open(clusterTransportSocket)
			if w, err = upstreamMTLSSocket(w, sans, serverName, h2); err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			w = w.close(ts)
		case tlsAuto:
			w, m = w.open(clusterSocketMatches)
			w = w.str(socketMatchName, socketMatchIstio).message(socketMatchMatch, tlsModeMatchWire())
			w, ts = w.open(socketMatchSocket)
			if w, err = upstreamMTLSSocket(w, sans, serverName, h2); err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			w = w.close(ts).close(m)
			w = append(w, plaintextSocketMatchWire()...)
		}
		return w, nil
	}}
}

// otherCluster encodes an outbound cluster that is not an EDS one: a
// cluster whose TLS mode is refused (static, without endpoints, so nothing
// leaks in plaintext), or a headless service's (see asPassthrough).
func (b *builder) otherCluster(oc outboundCluster, mode clusterTLS, upstream upstreamProtocol) ([]byte, error) {
	c, err := outboundShape(upstream, oc.connectionPool())
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
	}
	c.Name = oc.name
	c.EdsClusterConfig = nil
	if mode == tlsRefused {
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}
		c.LoadAssignment = &endpoint.ClusterLoadAssignment{ClusterName: oc.name}
		return proto.MarshalOptions{Deterministic: true}.Marshal(c)
	}
	mtls := b.asPassthrough(c, oc, mode)
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil || !mtls {
		return raw, err
	}
	w, ts := wire(raw).open(clusterTransportSocket)
	if w, err = upstreamMTLSSocket(w, b.serviceIdentities(oc.svc), sni(oc.svc.Hostname, oc.subset.GetName(), oc.port.Port), upstream == upstreamH2); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", oc.name, err)
	}
	return w.close(ts), nil
}

// Field numbers of envoy.config.cluster.v3.Cluster and of what it nests.
const (
	clusterName            = 1  // Cluster.name
	clusterEDSConfig       = 3  // Cluster.eds_cluster_config
	edsServiceName         = 2  // Cluster.EdsClusterConfig.service_name
	clusterTransportSocket = 24 // Cluster.transport_socket
	clusterSocketMatches   = 43 // Cluster.transport_socket_matches
	socketMatchName        = 1  // Cluster.TransportSocketMatch.name
	socketMatchMatch       = 2  // Cluster.TransportSocketMatch.match
	socketMatchSocket      = 3  // Cluster.TransportSocketMatch.transport_socket
)

// plaintextSocketMatch is auto-mTLS's catch-all: raw TCP to endpoints not
// marked for Istio mTLS.
var plaintextSocketMatch = &cluster.Cluster_TransportSocketMatch{
	Name: "tlsMode-disabled", Match: &structpb.Struct{},
	TransportSocket: &core.TransportSocket{Name: rawSocketName, ConfigType: &core.TransportSocket_TypedConfig{
		TypedConfig: mustAny(&rawbuffer.RawBuffer{}),
	}},
}

// plaintextSocketMatchWire is plaintextSocketMatch as a field of a
// cluster, marshalled once.
var plaintextSocketMatchWire = sync.OnceValue(func() resource.Preencoded {
	p, err := resource.Preencode(&cluster.Cluster{TransportSocketMatches: []*cluster.Cluster_TransportSocketMatch{plaintextSocketMatch}})
	if err != nil {
		panic(err) // constant input; every test that generates a cluster runs it
	}
	return p
})

// tlsModeMatchWire is tlsModeMatch marshalled once.
var tlsModeMatchWire = sync.OnceValue(func() resource.Preencoded {
	p, err := resource.Preencode(tlsModeMatch())
	if err != nil {
		panic(err) // constant input, as above
	}
	return p
})

// upstreamProtocol is the HTTP a cluster speaks to its endpoints.
type upstreamProtocol int

const (
	upstreamDefault    upstreamProtocol = iota // HTTP/1.1 (or TCP)
	upstreamH2                                 // HTTP/2 (gRPC, HTTP/2 ports)
	upstreamDownstream                         // as the client spoke it (sniffed ports)
	upstreamProtocols
)

func upstreamProtocolOf(p model.Port) upstreamProtocol {
	switch protocolOf(p) {
	case protoHTTP2:
		return upstreamH2
	case protoAuto:
		// HTTP sniffed on the port goes upstream as it came (h2c as
		// HTTP/2), as Istio's setUseDownstreamProtocol does.
		return upstreamDownstream
	}
	return upstreamDefault
}

// edsClusterShape is what every outbound EDS cluster speaking upstream has.
func edsClusterShape(upstream upstreamProtocol) (*cluster.Cluster, error) {
	c := &cluster.Cluster{
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:       connectTimeout,
		LbPolicy:             cluster.Cluster_LEAST_REQUEST,
		CircuitBreakers:      unlimited(),
	}
	var err error
	if c.Filters, err = clusterFilters(); err != nil {
		return nil, err
	}
	switch upstream {
	case upstreamH2:
		opts, err := anypb.New(&httpopts.HttpProtocolOptions{
			UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &core.Http2ProtocolOptions{}},
			}},
		})
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: opts}
	case upstreamDownstream:
		if _, err := withDownstreamProtocol(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// edsClusterShapes are edsClusterShape of each upstream protocol,
// validated and marshalled once.
var edsClusterShapes = sync.OnceValues(func() ([upstreamProtocols]resource.Preencoded, error) {
	var out [upstreamProtocols]resource.Preencoded
	for upstream := range upstreamProtocols {
		c, err := edsClusterShape(upstream)
		if err != nil {
			return out, fmt.Errorf("cluster shape: %w", err)
		}
		c.Name = "shape" // the one field validation requires
		if err := c.ValidateAll(); err != nil {
			return out, fmt.Errorf("cluster shape: %w", err)
		}
		c.Name = ""
		p, err := resource.Preencode(c)
		if err != nil {
			return out, err
		}
		out[upstream] = p
	}
	return out, nil
})

func tlsModeMatch() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{tlsModeMatchKey: structpb.NewStringValue(tlsModeIstio)}}
}

// serviceIdentities are the SPIFFE IDs of the service accounts behind svc:
// the identities its servers may present.
func (b *builder) serviceIdentities(svc *model.Service) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ids, ok := b.identities[svc]; ok {
		return ids
	}
	type account struct{ namespace, name string }
	var accounts []account
	for _, eps := range svc.Endpoints {
		for _, ep := range eps {
			if a := (account{ep.Namespace, ep.ServiceAccount}); !slices.Contains(accounts, a) {
				accounts = append(accounts, a)
			}
		}
	}
	out := make([]string, 0, len(accounts))
	for _, a := range accounts {
		if id, err := spiffeid.FromSegments(b.g.TrustDomain, "ns", a.namespace, "sa", a.name); err == nil {
			out = append(out, id.String())
		}
	}
	// A ServiceEntry's subjectAltNames are identities of its servers too.
	if svc.Entry != nil {
		for _, san := range svc.Entry.SubjectAltNames {
			if !slices.Contains(out, san) {
				out = append(out, san)
			}
		}
	}
	slices.Sort(out)
	if b.identities == nil {
		b.identities = map[*model.Service][]string{}
	}
	b.identities[svc] = out
	return out
}

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		InitialFetchTimeout:   zeroFetchTimeout,
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}
