package xds

import (
	"errors"
	"maps"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model"
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

// ErrClusterMismatch: a proxy's node metadata CLUSTER_ID names a cluster
// other than the one that authenticated it. Istio serves such a proxy the
// Pods and Secrets of the cluster it claims (the gap of Istio's closed PR
// #52401); Bulwark refuses it.
var ErrClusterMismatch = errors.New("node cluster does not match the authenticating cluster")

// ErrRemoteCluster: a debug client (istioctl) was authenticated by a
// remote cluster; the proxies it would read are this cluster's.
var ErrRemoteCluster = errors.New("debug client of a remote cluster")

// ErrClusterNotInModel: a proxy was authenticated by a remote cluster
// whose pods are not in the model (not read yet, or withdrawn): its
// workload cannot be looked up there, and is not looked up elsewhere.
var ErrClusterNotInModel = errors.New("the authenticating cluster's pods are not in the model")

// bindCluster binds the proxy of w to the cluster that authenticated it:
// the cluster of caller (a token's reviewing cluster; istiod's own for a
// client certificate, an OIDC token, or the plaintext port, where caller
// is nil). Node metadata CLUSTER_ID, when set, must name that cluster. A
// remote cluster's proxy is served once that cluster's pods are in the
// model.
func (s *Server) bindCluster(w *nodeWorkload, node *core.Node, meta *NodeMeta, caller *authn.Caller) error {
	authenticated := s.cfg.ClusterID
	if caller != nil && caller.ClusterID != "" {
		authenticated = caller.ClusterID
	}
	if meta.ClusterID != "" && meta.ClusterID != authenticated {
		s.log.Warn("proxy rejected", "node", node.GetId(), "claimed_cluster", meta.ClusterID,
			"authenticated_cluster", authenticated, "err", ErrClusterMismatch)
		return errClusterMismatch
	}
	w.clusterID = authenticated
	if authenticated == s.cfg.ClusterID {
		return nil
	}
	if !s.state.Load().snap.HasRemotePods(authenticated) {
		s.log.Warn("proxy rejected", "node", node.GetId(), "authenticated_cluster", authenticated, "err", ErrClusterNotInModel)
		return errClusterNotInModel
	}
	w.cluster = authenticated
	return nil
}

// registryPod is the pod of w's node ID in the registry of w's cluster,
// or nil: the local registry (none in the file model), or the remote
// cluster's, never another cluster's pod of the same name.
func (w *nodeWorkload) registryPod(snap *model.Snapshot) *model.Pod {
	if w.pod == "" {
		return nil
	}
	if w.cluster != "" {
		pod, _ := snap.RemotePod(w.cluster, w.namespace, w.pod)
		return pod
	}
	if !snap.HasPods() {
		return nil
	}
	return snap.Pod(w.namespace, w.pod)
}

// withCluster is labels with topology.istio.io/cluster set to the
// workload's cluster, as Istio labels a proxy's workload (whatever the pod
// says): labels itself when it already is, or when the cluster has no ID.
func (w *nodeWorkload) withCluster(labels map[string]string) map[string]string {
	if w.clusterID == "" {
		return labels
	}
	if v, ok := labels[model.ClusterLabel]; ok && v == w.clusterID {
		return labels
	}
	out := make(map[string]string, len(labels)+1)
	maps.Copy(out, labels)
	out[model.ClusterLabel] = w.clusterID
	return out
}
