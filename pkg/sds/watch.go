package sds

import (
	"cmp"
	"slices"
)

// Watch is one consumer's interest in secrets: the names one proxy asks
// for. The Server watches the Secrets of a namespace only while a Watch
// asks for one of them, and tells a Watch of a change only when one of
// the Secrets its names may read, or the trust bundle it asks for,
// changed.
type Watch struct {
	s      *Server
	proxy  Proxy
	notify func()

	// Guarded by s.mu.
	refs   []secretKey // sorted; all in proxy.Namespace
	rootCA bool
	closed bool
}

// secretKey is a Kubernetes Secret, by cluster (empty: the local one),
// namespace and name.
type secretKey struct{ cluster, namespace, name string }

func (k secretKey) compare(o secretKey) int {
	return cmp.Or(cmp.Compare(k.cluster, o.cluster), cmp.Compare(k.namespace, o.namespace), cmp.Compare(k.name, o.name))
}

// nsKey is a namespace of a cluster (empty: the local one).
type nsKey struct{ cluster, namespace string }

// Watch registers a consumer of the secrets Generate gives p. notify is
// called whenever what Generate gives p for the names last Set may have
// changed; it is called with no lock of the Server held, from the
// Server's goroutines or from the registry of remote clusters telling of
// a cluster's change, and must not block. Watch does no I/O.
func (s *Server) Watch(p Proxy, notify func()) *Watch {
	return &Watch{s: s, proxy: p, notify: notify}
}

// Set replaces the names the consumer asks for. Only what Generate could
// serve p is watched: nothing for a plaintext stream, and only Secrets of
// p's own namespace in p's own cluster.
func (w *Watch) Set(names []string) {
	refs, root := w.s.secretsOf(w.proxy, names)
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed || (root == w.rootCA && slices.Equal(refs, w.refs)) {
		return
	}
	s.setLocked(w, refs, root)
}

// Close ends the watch; notify is not called after it returns, except by
// a notification already under way.
func (w *Watch) Close() {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		return
	}
	s.setLocked(w, nil, false)
	w.closed = true
}

// secretsOf returns the Secrets whose content Generate reads for p and
// names, and whether it reads the trust bundle.
func (s *Server) secretsOf(p Proxy, names []string) (refs []secretKey, rootCA bool) {
	if !p.Secure {
		return nil, false
	}
	for _, n := range names {
		if n == RootCAName {
			rootCA = true
			continue
		}
		ref, ok := parseName(n, p.Namespace)
		if !ok || ref.namespace != p.Namespace || (s.cfg.Client == nil && p.Cluster == "") {
			continue
		}
		for _, c := range ref.candidates() {
			refs = append(refs, secretKey{p.Cluster, ref.namespace, c})
		}
	}
	slices.SortFunc(refs, secretKey.compare)
	return slices.Compact(refs), rootCA
}

// setLocked indexes w under refs and root instead of what it had. The
// namespace is held before it is released, so that a consumer changing
// names keeps its namespace watched.
func (s *Server) setLocked(w *Watch, refs []secretKey, root bool) {
	for _, r := range w.refs {
		delete(s.consumers[r], w)
		if len(s.consumers[r]) == 0 {
			delete(s.consumers, r)
		}
	}
	for _, r := range refs {
		if s.consumers[r] == nil {
			s.consumers[r] = map[*Watch]struct{}{}
		}
		s.consumers[r][w] = struct{}{}
	}
	if root {
		s.roots[w] = struct{}{}
	} else {
		delete(s.roots, w)
	}
	ns := nsKey{w.proxy.Cluster, w.proxy.Namespace}
	if len(refs) > 0 {
		s.holdNamespaceLocked(ns)
	}
	if len(w.refs) > 0 {
		s.releaseNamespaceLocked(ns)
	}
	w.refs, w.rootCA = refs, root
}

// notifySecret tells the consumers of the Secret k that it changed.
func (s *Server) notifySecret(k secretKey) {
	s.mu.Lock()
	ws := make([]*Watch, 0, len(s.consumers[k]))
	for w := range s.consumers[k] {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.notify()
	}
}

// notifyRoots tells the consumers of ROOTCA that the trust bundle changed.
func (s *Server) notifyRoots() {
	s.mu.Lock()
	ws := make([]*Watch, 0, len(s.roots))
	for w := range s.roots {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.notify()
	}
}
