package multicluster

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// ClusterInfo describes a remote cluster, in the form of Istio's
// /debug/clusterz (read by `istioctl remote-clusters`).
type ClusterInfo struct {
	ID         string `json:"id"`
	SecretName string `json:"secretName"`
	SyncStatus string `json:"syncStatus"`
}

// Clusters lists the registered remote clusters, sorted by ID.
func (c *Controller) Clusters() []ClusterInfo {
	c.mu.RLock()
	out := make([]ClusterInfo, 0, len(c.clusters))
	for _, cl := range c.clusters {
		out = append(out, ClusterInfo{ID: cl.ID, SecretName: cl.Secret.String(), SyncStatus: cl.status})
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b ClusterInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Handler serves Clusters as JSON, Istio's /debug/clusterz. It shows
// cluster IDs and secret names, not kubeconfigs or servers; mount it for
// loopback callers only all the same.
func (c *Controller) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(c.Clusters())
	})
}
