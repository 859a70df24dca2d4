package bootstrap

import (
	"crypto/x509"
	"maps"
	"slices"
	"sync"

	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
)

// remoteRoots are the istio-ca-root-cert controllers of the remote
// clusters this istiod controls (primary-remote), by cluster ID, while
// it controls them: a root rotation waits for their ConfigMaps as for
// its own cluster's, since the remote's proxies read the new root there.
type remoteRoots struct {
	mu    sync.Mutex
	roots map[string]*rootcert.Controller
}

// add records the controller of cluster for as long as it runs; the
// function returned withdraws it.
func (r *remoteRoots) add(cluster string, c *rootcert.Controller) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.roots == nil {
		r.roots = map[string]*rootcert.Controller{}
	}
	r.roots[cluster] = c
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.roots[cluster] == c {
			delete(r.roots, cluster)
		}
	}
}

// missing names, as "<cluster>/<namespace>", the namespaces of the
// controlled remote clusters whose istio-ca-root-cert does not hold root,
// and as "<cluster>/*" a cluster whose namespaces and ConfigMaps are not
// listed yet: what they hold is not known, so a rotation waits.
func (r *remoteRoots) missing(root *x509.Certificate) []string {
	r.mu.Lock()
	roots := maps.Clone(r.roots)
	r.mu.Unlock()
	var out []string
	for _, cluster := range slices.Sorted(maps.Keys(roots)) {
		c := roots[cluster]
		if !c.HasSynced() {
			out = append(out, cluster+"/*")
			continue
		}
		for _, ns := range c.NamespacesWithoutRoot(root) {
			out = append(out, cluster+"/"+ns)
		}
	}
	return out
}
