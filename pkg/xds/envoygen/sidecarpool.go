package envoygen

import (
	"fmt"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// The connection limits a Sidecar sets on the proxy's inbound clusters,
// as Istio's buildInboundCluster applies them: an ingress listener's
// connectionPool, else the Sidecar's inboundConnectionPool, replaces
// whatever else would apply (the DestinationRule's, inboundTargetPool).

// inboundPool is the connection pool of the inbound cluster of port:
// that port's ingress listener's, else the Sidecar's
// inboundConnectionPool; nil for none.
func inboundPool(sc *model.Sidecar, port uint32) *networkingv1.ConnectionPoolSettings {
	spec := sc.GetSpec()
	for _, in := range spec.GetIngress() {
		if in.GetPort().GetNumber() == port && in.GetConnectionPool() != nil {
			return in.GetConnectionPool()
		}
	}
	return spec.GetInboundConnectionPool()
}

// applyInboundPool sets on c, an inbound cluster of a port of protocol
// lp, Istio's upstream protocol for that port (HTTP/2 for HTTP/2 and
// gRPC, the client's for a sniffed port) and pool's limits, as Istio's
// applyConnectionPool: circuit breaker thresholds from the positive
// limits, the connect timeout, TCP keepalive, and the HTTP idle timeout,
// requests per connection and connection duration; HTTP/2's concurrent
// streams and keepalive where the cluster speaks HTTP/2.
func applyInboundPool(c *cluster.Cluster, pool *networkingv1.ConnectionPoolSettings, lp protocol) error {
	upstream := upstreamDefault
	switch lp {
	case protoHTTP2:
		upstream = upstreamH2
	case protoAuto:
		upstream = upstreamDownstream
	}
	return applyPool(c, pool, upstream)
}

// applyPool sets on c the upstream protocol upstream and pool's limits,
// as applyInboundPool says; outbound clusters share it.
func applyPool(c *cluster.Cluster, pool *networkingv1.ConnectionPoolSettings, upstream upstreamProtocol) error {
	if err := checkPoolDurations(pool); err != nil {
		return fmt.Errorf("cluster %s: connection pool: %w", c.Name, err)
	}
	opts := &httpopts.HttpProtocolOptions{}
	var h2 *core.Http2ProtocolOptions
	switch upstream {
	case upstreamH2:
		h2 = &core.Http2ProtocolOptions{}
		opts.UpstreamProtocolOptions = &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2},
		}}
	case upstreamDownstream:
		opts.UpstreamProtocolOptions = useDownstreamProtocol()
	}
	if pool != nil {
		applyPoolLimits(c, pool)
		h := pool.GetHttp()
		idle := h.GetIdleTimeout()
		if idle == nil {
			idle = pool.GetTcp().GetIdleTimeout()
		}
		common := &core.HttpProtocolOptions{IdleTimeout: idle, MaxConnectionDuration: pool.GetTcp().GetMaxConnectionDuration()}
		if n := h.GetMaxRequestsPerConnection(); n > 0 {
			common.MaxRequestsPerConnection = wrapperspb.UInt32(uint32(n))
		}
		ka := h.GetHttp2KeepAlive()
		if common.IdleTimeout != nil || common.MaxConnectionDuration != nil || common.MaxRequestsPerConnection != nil || h.GetMaxConcurrentStreams() > 0 || ka != nil {
			opts.CommonHttpProtocolOptions = common
			if h2 != nil && h.GetMaxConcurrentStreams() > 0 {
				h2.MaxConcurrentStreams = wrapperspb.UInt32(uint32(h.GetMaxConcurrentStreams()))
			}
			if h2 != nil && ka != nil {
				h2.ConnectionKeepalive = &core.KeepaliveSettings{Interval: ka.GetInterval(), Timeout: ka.GetTimeout()}
			}
		}
		if h.GetUseClientProtocol() {
			opts.UpstreamProtocolOptions = useDownstreamProtocol()
		}
	}
	if opts.UpstreamProtocolOptions == nil {
		if opts.CommonHttpProtocolOptions == nil {
			return nil
		}
		// Envoy requires an upstream protocol beside the common options:
		// HTTP/1, as Istio's clusterWrapper.build sets it.
		opts.UpstreamProtocolOptions = &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &core.Http1ProtocolOptions{}},
		}}
	}
	a, err := anypb.New(opts)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: a}
	return nil
}

// applyPoolLimits sets c's circuit breakers, connect timeout and TCP
// keepalive from pool.
func applyPoolLimits(c *cluster.Cluster, pool *networkingv1.ConnectionPoolSettings) {
	th := unlimited().Thresholds[0]
	if h := pool.GetHttp(); h != nil {
		if n := h.GetHttp2MaxRequests(); n > 0 {
			th.MaxRequests = wrapperspb.UInt32(uint32(n))
		}
		if n := h.GetHttp1MaxPendingRequests(); n > 0 {
			th.MaxPendingRequests = wrapperspb.UInt32(uint32(n))
		}
		if n := h.GetMaxRetries(); n > 0 {
			th.MaxRetries = wrapperspb.UInt32(uint32(n))
		}
	}
	if t := pool.GetTcp(); t != nil {
		if d := t.GetConnectTimeout(); d != nil {
			c.ConnectTimeout = d
		}
		if n := t.GetMaxConnections(); n > 0 {
			th.MaxConnections = wrapperspb.UInt32(uint32(n))
		}
		if ka := t.GetTcpKeepalive(); ka != nil {
			k := &core.TcpKeepalive{}
			if ka.GetProbes() > 0 {
				k.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
			}
			if ka.GetTime() != nil {
				k.KeepaliveTime = wrapperspb.UInt32(uint32(ka.GetTime().GetSeconds()))
			}
			if ka.GetInterval() != nil {
				k.KeepaliveInterval = wrapperspb.UInt32(uint32(ka.GetInterval().GetSeconds()))
			}
			c.UpstreamConnectionOptions = &cluster.UpstreamConnectionOptions{TcpKeepalive: k}
		}
	}
	c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{th}}
}

func useDownstreamProtocol() *httpopts.HttpProtocolOptions_UseDownstreamProtocolConfig {
	return &httpopts.HttpProtocolOptions_UseDownstreamProtocolConfig{
		UseDownstreamProtocolConfig: &httpopts.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions:  &core.Http1ProtocolOptions{},
			Http2ProtocolOptions: &core.Http2ProtocolOptions{},
		},
	}
}

// inboundClusters are the proxy's "inbound|<port>||" clusters: those of
// its Sidecar's ingress listeners when it has any, else one per inbound
// target, to the connection's original destination, speaking upstream as
// Istio's setUpstreamProtocol has a service port's inbound cluster speak
// (HTTP/2 for HTTP/2 and gRPC ports, the client's protocol for sniffed
// ones), with the connection pool of inboundTargetPool.
func (b *builder) inboundClusters() []resource.Resource {
	if in := b.ingressListeners(); in != nil {
		return b.ingressClusters(in)
	}
	sidecarPool := b.egress().sidecar.GetSpec().GetInboundConnectionPool()
	targets := b.inboundTargets()
	out := make([]resource.Resource, 0, len(targets))
	for _, t := range targets {
		name := inboundClusterName(t.port)
		lp := t.protocol
		pool := b.inboundTargetPool(t, sidecarPool)
		pk, err := poolKey(pool)
		if err != nil {
			out = append(out, resource.Resource{Name: name, Key: key("cds", name), Build: func() (proto.Message, error) { return nil, fmt.Errorf("cluster %s: %w", name, err) }})
			continue
		}
		out = append(out, resource.Resource{Name: name, Key: key("cds", name, strconv.Itoa(int(lp)), pk), Build: func() (proto.Message, error) {
			c := originalDst(name, true)
			if err := applyInboundPool(c, pool, lp); err != nil {
				return nil, err
			}
			return c, nil
		}})
	}
	return out
}

// inboundTargetPool is the connection pool of t's inbound cluster, as
// Istio's buildInboundCluster chooses it: the Sidecar's
// inboundConnectionPool when it sets one, else the connectionPool of the
// DestinationRule for t's service without a workloadSelector (Istio
// honours selectors on outbound clusters only), for t's service port.
func (b *builder) inboundTargetPool(t inboundTarget, sidecarPool *networkingv1.ConnectionPoolSettings) *networkingv1.ConnectionPoolSettings {
	if sidecarPool != nil || t.svc == nil {
		return sidecarPool
	}
	dr := b.snap.DestinationRuleFor(t.svc.Hostname, b.p.Namespace, nil)
	if dr.GetSpec().GetWorkloadSelector() != nil {
		return nil
	}
	pool, _ := portConnectionPool(dr.GetSpec().GetTrafficPolicy(), t.svcPort.Port)
	return pool
}
