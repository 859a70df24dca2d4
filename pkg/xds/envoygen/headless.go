package envoygen

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// headless reports whether oc is a cluster of a headless service: Istio's
// Passthrough resolution, an ORIGINAL_DST cluster that connects where the
// client connected (its listener is the endpoint's own address), without
// EDS.
func (oc outboundCluster) headless() bool { return len(oc.svc.Addresses) == 0 }

// asPassthrough turns the EDS cluster c of a headless service into
// Istio's ORIGINAL_DST one. Auto-mTLS cannot choose per endpoint (an
// ORIGINAL_DST host has no endpoint metadata), so, as Istio's
// BestEffortInferServiceMTLSMode, the cluster uses mTLS when every
// endpoint of the port accepts it and there is one, else plaintext.
func (b *builder) asPassthrough(c *cluster.Cluster, oc outboundCluster, mode clusterTLS) error {
	c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
	c.EdsClusterConfig = nil
	c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
	if mode != tlsAuto {
		return nil
	}
	var mtls *cluster.Cluster_TransportSocketMatch
	for _, m := range c.TransportSocketMatches {
		if m.Name == socketMatchIstio {
			mtls = m
		}
	}
	c.TransportSocketMatches = nil
	eps := oc.svc.Endpoints[oc.port.Port]
	if mtls == nil || len(eps) == 0 {
		return nil
	}
	for _, ep := range eps {
		if !b.acceptsMTLS(oc, ep) {
			return nil
		}
	}
	if mtls.TransportSocket == nil {
		return fmt.Errorf("cluster %s: auto-mTLS match without a socket", c.Name)
	}
	c.TransportSocket = mtls.TransportSocket
	return nil
}
