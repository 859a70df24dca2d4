package xds

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// A proxy belongs to the cluster that authenticated it, and to no other:
// its workload (the Pod its node ID names: labels, addresses, service
// account) is looked up in that cluster's registry alone, its
// credentialName Secrets come from that cluster alone (sds.Proxy.Cluster),
// and its workload carries that cluster as label topology.istio.io/cluster,
// as Istio labels a proxy with its cluster. Istio configuration
// (policies, routes, rules) is the config cluster's, istiod's own, for
// every proxy, as in Istio's multi-primary.
//
// Istio picks the registry of a proxy's Pod and Secrets by the node
// metadata CLUSTER_ID, which the proxy chooses, and reviews its token in
// the cluster its ClusterID header names: nothing ties the two (Istio's
// closed PR #52401). Bulwark refuses a node whose CLUSTER_ID names
// another cluster than the one that authenticated it.

var (
	errClusterMismatch = status.Error(codes.PermissionDenied, "node cluster does not match the authenticating cluster")
	// errRemoteCluster refuses debug clients of remote clusters.
	errRemoteCluster = status.Error(codes.PermissionDenied, "debug clients of remote clusters are not served")
	// errClusterNotInModel is retried by proxies: their cluster's
	// registry joins the model once its API server has been read.
	errClusterNotInModel = status.Error(codes.Unavailable, "the proxy's cluster is not known yet, retry later")
)

// bindCluster binds the proxy of w to the cluster that authenticated it:
// the cluster of caller (a token's reviewing cluster; istiod's own for a
// client certificate, an OIDC token, or the plaintext port, where caller
// is nil). Node metadata CLUSTER_ID, when set, must name that cluster. A
// remote cluster's proxy is served once that cluster's pods are in the
// model.
func (s *Server) bindCluster(w *identity.Workload, node *core.Node, meta *identity.NodeMeta, caller *authn.Caller) error {
	authenticated, err := identity.BindCluster(s.cfg.ClusterID, s.cfg.ClusterAliases, meta, caller)
	if err != nil {
		s.log.Warn("proxy rejected", "node", node.GetId(), "claimed_cluster", meta.ClusterID,
			"authenticated_cluster", authenticated, "err", err)
		return errClusterMismatch
	}
	w.ClusterID = authenticated
	if authenticated == s.cfg.ClusterID {
		return nil
	}
	if !s.state.Load().snap.HasRemotePods(authenticated) {
		s.log.Warn("proxy rejected", "node", node.GetId(), "authenticated_cluster", authenticated, "err", identity.ErrClusterNotInModel)
		return errClusterNotInModel
	}
	w.Cluster = authenticated
	return nil
}
