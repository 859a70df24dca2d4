package envoygen

import (
	"slices"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// headless reports whether oc is a cluster of a headless service: Istio's
// Passthrough resolution, an ORIGINAL_DST cluster that connects where the
// client connected (its listener is the endpoint's own address), without
// EDS. A router's are EDS clusters, as Istio makes them for gateways: it
// has no listener per endpoint, and routes by name.
func (oc outboundCluster) headless() bool {
	return (oc.svc.Headless || oc.passthroughEntry()) && !oc.router
}

// asPassthrough turns the cluster c of a headless service into Istio's
// ORIGINAL_DST one, and reports whether it uses Istio mTLS. Auto-mTLS
// cannot choose per endpoint (an ORIGINAL_DST host has no endpoint
// metadata), so, as Istio's BestEffortInferServiceMTLSMode, the cluster
// uses mTLS when every endpoint of the port accepts it and there is one,
// else plaintext.
func (b *builder) asPassthrough(c *cluster.Cluster, oc outboundCluster, mode clusterTLS) bool {
	c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
	c.EdsClusterConfig = nil
	c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
	if target, ok := oc.svc.Entry.GetTargetPorts()[oc.port.Port]; ok {
		c.LbConfig = &cluster.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &cluster.Cluster_OriginalDstLbConfig{
			UpstreamPortOverride: wrapperspb.UInt32(target),
		}}
	}
	switch mode {
	case tlsMutual:
		return true
	case tlsAuto:
		eps := oc.svc.Endpoints[oc.port.Port]
		return len(eps) > 0 && !slices.ContainsFunc(eps, func(ep model.Endpoint) bool { return !b.acceptsMTLS(oc, ep) })
	}
	return false
}
