package envoygen

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
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
}

// outboundClusters lists every outbound cluster the proxy sees: each TCP
// or HTTP service port, and each subset of its DestinationRule.
func (b *builder) outboundClusters() []outboundCluster {
	var out []outboundCluster
	for _, svc := range b.snap.Services() {
		dr := b.snap.DestinationRule(svc.Hostname, b.p.Namespace)
		for _, port := range svc.Ports {
			if protocolOf(port) == protoUDP {
				continue
			}
			out = append(out, outboundCluster{name: resource.ClusterName(svc.Hostname, "", port.Port), svc: svc, port: port, dr: dr})
			for _, ss := range dr.GetSpec().GetSubsets() {
				if ss.GetName() == "" {
					continue
				}
				out = append(out, outboundCluster{
					name: resource.ClusterName(svc.Hostname, ss.GetName(), port.Port), svc: svc, port: port, subset: ss, dr: dr,
				})
			}
		}
	}
	return out
}

func (b *builder) clusters() []resource.Resource {
	var out []resource.Resource
	for _, oc := range b.outboundClusters() {
		out = append(out, b.outboundClusterResource(oc))
	}
	for _, t := range b.inboundTargets() {
		name := inboundClusterName(t.port)
		out = append(out, resource.Resource{Name: name, Key: key("cds", name), Build: func() (proto.Message, error) {
			return originalDst(name, true), nil
		}})
	}
	out = append(out,
		resource.Resource{Name: passthroughCluster, Key: key("cds", passthroughCluster), Build: func() (proto.Message, error) {
			return withDownstreamProtocol(originalDst(passthroughCluster, false))
		}},
		resource.Resource{Name: inboundPassthroughCluster, Key: key("cds", inboundPassthroughCluster), Build: func() (proto.Message, error) {
			return withDownstreamProtocol(originalDst(inboundPassthroughCluster, true))
		}},
		resource.Resource{Name: blackholeCluster, Key: key("cds", blackholeCluster), Build: func() (proto.Message, error) {
			return &cluster.Cluster{
				Name:                 blackholeCluster,
				ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
				ConnectTimeout:       connectTimeout,
			}, nil
		}},
	)
	return out
}

func inboundClusterName(port uint32) string {
	return "inbound|" + strconv.FormatUint(uint64(port), 10) + "||"
}

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
	tlsAuto    clusterTLS = iota // mTLS to endpoints marked tlsMode=istio, plaintext to the rest
	tlsMutual                    // ISTIO_MUTUAL to every endpoint
	tlsPlain                     // no TLS
	tlsRefused                   // a mode not supported yet: no endpoints, so nothing leaks in plaintext
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
	default: // SIMPLE, MUTUAL: origination is not supported yet
		return tlsRefused
	}
	if b.g.Mesh.DisableAutoMTLS {
		return tlsPlain
	}
	return tlsAuto
}

// tlsSettings is the cluster's DestinationRule TLS as Istio merges it: the
// subset's port-level setting, the subset's, the rule's port-level, the
// rule's; nil when the rule does not say.
func (oc outboundCluster) tlsSettings() *networkingv1.ClientTLSSettings {
	if s := drTLS(oc.subset.GetTrafficPolicy(), oc.port.Port); s != nil {
		return s
	}
	return drTLS(oc.dr.GetSpec().GetTrafficPolicy(), oc.port.Port)
}

// drTLS is a traffic policy's TLS for port: port-level first. A nil result
// means the policy does not say.
func drTLS(tp *networkingv1.TrafficPolicy, port uint32) *networkingv1.ClientTLSSettings {
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port && pl.GetTls() != nil {
			return pl.GetTls()
		}
	}
	return tp.GetTls()
}

func (b *builder) outboundClusterResource(oc outboundCluster) resource.Resource {
	mode := b.tlsOf(oc)
	subset := oc.subset.GetName()
	h2 := protocolOf(oc.port) == protoHTTP2
	auto := protocolOf(oc.port) == protoAuto
	name := oc.name
	return resource.Resource{Name: name, Key: key("cds", name, strconv.Itoa(int(mode))), Build: func() (proto.Message, error) {
		c := &cluster.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
			EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
			ConnectTimeout:       connectTimeout,
			LbPolicy:             cluster.Cluster_LEAST_REQUEST,
			CircuitBreakers:      unlimited(),
		}
		if h2 {
			opts, err := anypb.New(&httpopts.HttpProtocolOptions{
				UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &core.Http2ProtocolOptions{}},
				}},
			})
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: opts}
		}
		if auto {
			// HTTP sniffed on the port goes upstream as it came (h2c as
			// HTTP/2), as Istio's setUseDownstreamProtocol does.
			if _, err := withDownstreamProtocol(c); err != nil {
				return nil, err
			}
		}
		sans := b.serviceIdentities(oc.svc)
		switch mode {
		case tlsMutual:
			ts, err := upstreamMTLS(sans, sni(oc.svc.Hostname, subset, oc.port.Port), h2)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			c.TransportSocket = ts
		case tlsAuto:
			mtls, err := upstreamMTLS(sans, sni(oc.svc.Hostname, subset, oc.port.Port), h2)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			raw, err := rawBufferSocket()
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			c.TransportSocketMatches = []*cluster.Cluster_TransportSocketMatch{
				{Name: socketMatchIstio, Match: tlsModeMatch(), TransportSocket: mtls},
				{Name: "tlsMode-disabled", Match: &structpb.Struct{}, TransportSocket: raw},
			}
		case tlsRefused:
			c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}
			c.EdsClusterConfig = nil
			c.LoadAssignment = &endpoint.ClusterLoadAssignment{ClusterName: name}
		}
		if mode != tlsRefused && oc.headless() {
			if err := b.asPassthrough(c, oc, mode); err != nil {
				return nil, err
			}
		}
		return c, nil
	}}
}

func tlsModeMatch() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{tlsModeMatchKey: structpb.NewStringValue(tlsModeIstio)}}
}

// serviceIdentities are the SPIFFE IDs of the service accounts behind svc:
// the identities its servers may present.
func (b *builder) serviceIdentities(svc *model.Service) []string {
	var out []string
	for _, eps := range svc.Endpoints {
		for _, ep := range eps {
			if id, err := spiffeid.FromSegments(b.g.TrustDomain, "ns", ep.Namespace, "sa", ep.ServiceAccount); err == nil {
				out = append(out, id.String())
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		InitialFetchTimeout:   zeroFetchTimeout,
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}
