package envoygen

import (
	"fmt"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// What an outbound cluster speaks to its endpoints and its connection
// limits, as Istio's cluster builder decides them: the port's protocol
// first (setUpstreamProtocol: HTTP/2 for HTTP/2 and gRPC ports, the
// client's protocol for a sniffed port on a sidecar), then the
// DestinationRule's connectionPool (applyH2Upgrade, applyConnectionPool):
// h2UpgradePolicy or the mesh's upgrades an HTTP/1.1 cluster to HTTP/2,
// useClientProtocol makes it speak the client's protocol, and its limits,
// timeouts and HTTP options apply as on inbound clusters (applyPool).

// connectionPool is oc's DestinationRule connectionPool as Istio merges
// it for the cluster (MergeSubsetTrafficPolicy): a port-level entry for
// the port replaces the rule's policy, the subset's (or its port-level
// entry) replaces the rule's; nil when none applies.
func (oc outboundCluster) connectionPool() *networkingv1.ConnectionPoolSettings {
	pool, _ := portConnectionPool(oc.dr.GetSpec().GetTrafficPolicy(), oc.port.Port)
	if tp := oc.subset.GetTrafficPolicy(); tp != nil {
		if sp, portLevel := portConnectionPool(tp, oc.port.Port); sp != nil || portLevel {
			pool = sp
		}
	}
	return pool
}

// portConnectionPool is tp's connectionPool for port: that of its
// port-level entry for the port when it has one (portLevel), else its own.
func portConnectionPool(tp *networkingv1.TrafficPolicy, port uint32) (pool *networkingv1.ConnectionPoolSettings, portLevel bool) {
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port {
			return pl.GetConnectionPool(), true
		}
	}
	return tp.GetConnectionPool(), false
}

// upstreamOf is the HTTP oc's cluster speaks upstream under pool.
func (b *builder) upstreamOf(oc outboundCluster, pool *networkingv1.ConnectionPoolSettings) upstreamProtocol {
	up := upstreamProtocolOf(oc.port)
	if up == upstreamDownstream && oc.router {
		// Routers do not sniff: their clients negotiate h2 by ALPN
		// whatever the application speaks.
		up = upstreamDefault
	}
	h := pool.GetHttp()
	if h.GetUseClientProtocol() {
		return upstreamDownstream
	}
	if up == upstreamDefault && b.h2Upgrade(oc, h) {
		return upstreamH2
	}
	return up
}

// h2Upgrade reports whether an HTTP/1.1 cluster is upgraded to HTTP/2:
// as the rule's h2UpgradePolicy says (UPGRADE on any port), else on HTTP
// ports as the mesh's h2UpgradePolicy says.
func (b *builder) h2Upgrade(oc outboundCluster, h *networkingv1.ConnectionPoolSettings_HTTPSettings) bool {
	switch h.GetH2UpgradePolicy() {
	case networkingv1.ConnectionPoolSettings_HTTPSettings_UPGRADE:
		return true
	case networkingv1.ConnectionPoolSettings_HTTPSettings_DO_NOT_UPGRADE:
		return false
	}
	return protocolOf(oc.port).isHTTP() && b.g.Mesh.H2Upgrade
}

// outboundShape is edsClusterShape of upstream with pool applied.
func outboundShape(upstream upstreamProtocol, pool *networkingv1.ConnectionPoolSettings) (*cluster.Cluster, error) {
	c, err := edsClusterShape(upstream)
	if err != nil || pool == nil {
		return c, err
	}
	if err := applyPool(c, pool, upstream); err != nil {
		return nil, err
	}
	return c, nil
}

// poolKey is pool's part of a cluster's cache key.
func poolKey(pool *networkingv1.ConnectionPoolSettings) (string, error) {
	if pool == nil {
		return "", nil
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(pool)
	if err != nil {
		return "", fmt.Errorf("connection pool: %w", err)
	}
	return string(raw), nil
}

// pooledShape is outboundShape validated and marshalled, for the fields
// of one cluster to follow.
func pooledShape(upstream upstreamProtocol, pool *networkingv1.ConnectionPoolSettings) (resource.Preencoded, error) {
	c, err := outboundShape(upstream, pool)
	if err != nil {
		return nil, err
	}
	c.Name = "shape" // the one field validation requires
	if err := c.ValidateAll(); err != nil {
		return nil, err
	}
	c.Name = ""
	return resource.Preencode(c)
}

// passthroughIdleTimeout closes idle upstream HTTP connections of the
// passthrough clusters, as Istio's do.
const passthroughIdleTimeout = 5 * time.Minute

// passthroughProtocol makes a passthrough cluster speak HTTP upstream as
// the client spoke it downstream, and close idle connections after
// passthroughIdleTimeout.
func passthroughProtocol(c *cluster.Cluster) (proto.Message, error) {
	opts := &httpopts.HttpProtocolOptions{
		CommonHttpProtocolOptions: &core.HttpProtocolOptions{IdleTimeout: durationpb.New(passthroughIdleTimeout)},
		UpstreamProtocolOptions:   useDownstreamProtocol(),
	}
	a, err := anypb.New(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: a}
	return c, nil
}

// checkPoolDurations refuses a pool whose durations Envoy would reject
// (negative or malformed; a zero connect timeout), which validation
// refuses too: the cluster is left out, with an error, rather than the
// proxy's whole cluster update rejected.
func checkPoolDurations(pool *networkingv1.ConnectionPoolSettings) error {
	h, tcp := pool.GetHttp(), pool.GetTcp()
	for name, d := range map[string]*durationpb.Duration{
		"http.idleTimeout": h.GetIdleTimeout(), "http.http2KeepAlive.interval": h.GetHttp2KeepAlive().GetInterval(),
		"http.http2KeepAlive.timeout": h.GetHttp2KeepAlive().GetTimeout(), "tcp.connectTimeout": tcp.GetConnectTimeout(),
		"tcp.idleTimeout": tcp.GetIdleTimeout(), "tcp.maxConnectionDuration": tcp.GetMaxConnectionDuration(),
		"tcp.tcpKeepalive.time": tcp.GetTcpKeepalive().GetTime(), "tcp.tcpKeepalive.interval": tcp.GetTcpKeepalive().GetInterval(),
	} {
		if d == nil {
			continue
		}
		if err := d.CheckValid(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if d.AsDuration() < 0 || name == "tcp.connectTimeout" && d.AsDuration() == 0 {
			return fmt.Errorf("%s: %s is not a positive duration", name, d.AsDuration())
		}
	}
	return nil
}
