package sds

import (
	"k8s.io/client-go/kubernetes"
)

// Remote clusters' credentialName Secrets.
//
// A proxy authenticated by a remote cluster gets the Secrets of its own
// namespace in that cluster, read through the remote secret's kubeconfig
// (the client the registry of remote clusters hands to ClusterAdded), and
// only if its service account may get them there: the SubjectAccessReview
// is made in that cluster too. As in istiod's own cluster, a namespace's
// Secrets are watched only while a proxy in it asks for one. Istio looks
// up a remote proxy's Secret in its cluster and then, failing that, in the
// config cluster; Bulwark never reads another cluster's Secret for it.
//
// The registry's reader of a remote cluster needs list and watch on
// Secrets and create on SubjectAccessReviews there (the chart's
// global.readerSecrets); without them each Secret asked for is refused at
// once, logged and counted with reason "remote_cluster".

// remoteCluster is a registered remote cluster's access to its Secrets.
type remoteCluster struct {
	client kubernetes.Interface
	authz  Authorizer
}

// ClusterAdded registers the remote cluster id, or replaces its client:
// the Secrets its proxies are watching are read again with the new
// client (the old informers stop), and they are told. The client must
// serve long requests (watches). It does no I/O and does not block.
func (s *Server) ClusterAdded(id string, client kubernetes.Interface) {
	s.mu.Lock()
	s.remotes[id] = &remoteCluster{client: client, authz: s.cfg.RemoteAuthorizer(client)}
	ws := s.rewatchLocked(id)
	s.mu.Unlock()
	for _, w := range ws {
		w.notify()
	}
}

// ClusterRemoved withdraws the remote cluster id: its Secrets are no
// longer read nor served, and the proxies asking for them are told.
func (s *Server) ClusterRemoved(id string) {
	s.mu.Lock()
	delete(s.remotes, id)
	ws := s.rewatchLocked(id)
	s.mu.Unlock()
	for _, w := range ws {
		w.notify()
	}
}

// rewatchLocked replaces the namespace watches of cluster id by ones of
// its current client (none if it is gone), handing the old ones to Run
// to stop, and returns the Watches that read Secrets of id.
func (s *Server) rewatchLocked(id string) []*Watch {
	changed := false
	for key, old := range s.namespaces {
		if key.cluster != id {
			continue
		}
		n := s.newNamespaceWatch(key)
		n.consumers = old.consumers
		s.namespaces[key] = n
		s.retired = append(s.retired, old)
		changed = true
	}
	if changed {
		s.countWatchedLocked()
		s.wakeLocked()
	}
	seen := map[*Watch]struct{}{}
	var ws []*Watch
	for k, consumers := range s.consumers {
		if k.cluster != id {
			continue
		}
		for w := range consumers {
			if _, ok := seen[w]; !ok {
				seen[w] = struct{}{}
				ws = append(ws, w)
			}
		}
	}
	return ws
}
