// Package identity says who an xDS client is: the node metadata it
// claims (NodeMeta, read strictly and bounded), the workload its node ID
// names (Workload: Envoy sidecar or router, or proxyless gRPC; the pod it
// is bound to and what the registry says of that pod), the cluster that
// authenticated it (BindCluster), and the names istioctl knows it by
// (ProxyID).
//
// It is apart from the ADS server because every one of these is a check
// of untrusted input with its own limits and errors, read by the server
// when a stream is authenticated and by generation afterwards, and fuzzed
// on its own; none of it needs a stream.
package identity

import (
	"errors"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
)

// ErrIdentityMismatch is logged when node metadata names another identity
// than the authenticated caller's.
var ErrIdentityMismatch = errors.New("node identity does not match the caller")

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

// BindCluster names the cluster that authenticated a proxy: the cluster
// of caller (a token's reviewing cluster; own, istiod's cluster, for a
// client certificate, an OIDC token, or the plaintext port, where caller
// is nil). Node metadata CLUSTER_ID, when set, must name that cluster
// (else ErrClusterMismatch): itself, or an alias of it (aliases, Istio's
// --clusterAliases, which Istio also applies to CLUSTER_ID), and no other
// cluster. It returns the authenticating cluster either way.
func BindCluster(own string, aliases authn.ClusterAliases, meta *NodeMeta, caller *authn.Caller) (authenticated string, err error) {
	authenticated = own
	if caller != nil && caller.ClusterID != "" {
		authenticated = caller.ClusterID
	}
	if meta.ClusterID != "" && aliases.Resolve(meta.ClusterID) != authenticated {
		return authenticated, ErrClusterMismatch
	}
	return authenticated, nil
}

// ProxyID is Istio's proxy ID of a node: "<pod>.<namespace>" of a node ID
// "<type>~<ip>~<pod>.<namespace>~<domain>", else the whole node ID.
func ProxyID(node *core.Node) string {
	if _, _, id, err := ParseID(node.GetId()); err == nil {
		return id
	}
	return node.GetId()
}

// WorkloadNamespace is the namespace of a workload identity
// spiffe://<td>/ns/<namespace>/sa/<name> of trust domain td.
func WorkloadNamespace(id spiffeid.ID, td spiffeid.TrustDomain) (string, bool) {
	seg := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
	if id.TrustDomain() != td || len(seg) != 4 || seg[0] != "ns" || seg[2] != "sa" || seg[1] == "" {
		return "", false
	}
	return seg[1], true
}
