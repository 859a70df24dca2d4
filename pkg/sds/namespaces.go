package sds

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// syncWait bounds how long Generate waits for the Secrets of a namespace
// that has just got its first consumer to be listed.
const syncWait = 5 * time.Second

// secretSelector leaves out the Secrets that are never credentials and
// are often many and large, as Istio's istiod does: service-account
// tokens and Helm releases.
var secretSelector = fields.AndSelectors(
	fields.OneTermNotEqualSelector("type", string(corev1.SecretTypeServiceAccountToken)),
	fields.OneTermNotEqualSelector("type", "helm.sh/release.v1"),
).String()

// namespaceWatch is the informer of the Secrets of one namespace of one
// cluster, which runs while a consumer in the namespace asks for a Secret.
// Without a client (its remote cluster is not registered) it has no
// informer and reads nothing.
type namespaceWatch struct {
	key       nsKey
	factory   informers.SharedInformerFactory // nil: the cluster is not registered
	informer  cache.SharedIndexInformer
	handler   cache.ResourceEventHandlerRegistration // synced once the listed Secrets are handled
	lister    corelisters.SecretNamespaceLister
	authz     Authorizer    // the permission checks of a remote cluster; nil for the local one (Config.Authorizer)
	consumers int           // Watches asking for a Secret here; guarded by Server.mu
	started   bool          // by Run; guarded by Server.mu
	stopped   bool          // by Run, whose goroutine alone reads it
	stop      chan struct{} // closed to stop the informer
	synced    chan struct{} // closed once the informer has synced
	forbidden chan struct{} // closed when a list was forbidden before the informer synced
	forbid    sync.Once
}

// holdNamespaceLocked counts a consumer in ns, preparing the informer of
// its Secrets for Run to start when it is the first.
func (s *Server) holdNamespaceLocked(ns nsKey) {
	n := s.namespaces[ns]
	if n == nil {
		n = s.newNamespaceWatch(ns)
		s.namespaces[ns] = n
		s.countWatchedLocked()
		s.wakeLocked()
	}
	n.consumers++
}

// releaseNamespaceLocked uncounts a consumer in ns; the last one's leaving
// hands the informer to Run to stop.
func (s *Server) releaseNamespaceLocked(ns nsKey) {
	n := s.namespaces[ns]
	n.consumers--
	if n.consumers > 0 {
		return
	}
	delete(s.namespaces, ns)
	s.countWatchedLocked()
	s.retired = append(s.retired, n)
	s.wakeLocked()
}

func (s *Server) wakeLocked() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// newNamespaceWatch builds the informer of the Secrets of key, with the
// client of its cluster; it does no I/O. A list the API server forbids
// (a remote cluster's reader without the permission) closes forbidden,
// so that Generate refuses at once rather than waiting; the informer
// keeps retrying, and serves once the permission is granted.
func (s *Server) newNamespaceWatch(key nsKey) *namespaceWatch {
	n := &namespaceWatch{key: key, stop: make(chan struct{}), synced: make(chan struct{}), forbidden: make(chan struct{})}
	client, authz := s.cfg.Client, Authorizer(nil)
	if key.cluster != "" {
		rc := s.remotes[key.cluster]
		if rc == nil {
			return n
		}
		client, authz = rc.client, rc.authz
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(key.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = secretSelector }),
		informers.WithTransform(slim))
	inf := factory.Core().V1().Secrets()
	n.factory, n.informer, n.lister, n.authz = factory, inf.Informer(), inf.Lister().Secrets(key.namespace), authz
	// Setting the error handler and adding a handler fail only on an
	// informer started or stopped, not on one not yet started.
	_ = n.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if !apierrors.IsForbidden(err) {
			s.log.Debug("secrets watch interrupted", "cluster", key.cluster, "namespace", key.namespace, "err", err)
			return
		}
		n.forbid.Do(func() {
			s.log.Warn("secrets may not be listed; credentialName secrets of the namespace are refused until they may",
				"cluster", key.cluster, "namespace", key.namespace, "err", err)
			close(n.forbidden)
		})
	})
	n.handler, _ = n.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.secretChanged(key.cluster, obj) },
		UpdateFunc: func(old, cur any) {
			if !sameContent(old, cur) {
				s.secretChanged(key.cluster, cur)
			}
		},
		DeleteFunc: func(obj any) { s.secretChanged(key.cluster, obj) },
	})
	return n
}

// slim keeps of a Secret what Generate reads: its name, type and data,
// not its labels, annotations (kubectl's last-applied copy of the data
// among them) or managed fields.
func slim(obj any) (any, error) {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: sec.Namespace, Name: sec.Name, UID: sec.UID, ResourceVersion: sec.ResourceVersion,
		},
		Type: sec.Type,
		Data: sec.Data,
	}, nil
}

// sameContent reports whether an update left what Generate reads alone.
func sameContent(old, cur any) bool {
	a, ok := old.(*corev1.Secret)
	b, ok2 := cur.(*corev1.Secret)
	return ok && ok2 && a.Type == b.Type && maps.EqualFunc(a.Data, b.Data, bytes.Equal)
}

func (s *Server) secretChanged(cluster string, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if sec, ok := obj.(*corev1.Secret); ok {
		s.notifySecret(secretKey{cluster, sec.Namespace, sec.Name})
	}
}

// lister returns the Secrets of key once they are listed, and the
// permission checks of their cluster: errNotFound when no consumer asks
// for a Secret of key, or when they are not listed within syncWait;
// errUnknownCluster when key's cluster is not registered;
// errListForbidden when the API server forbids listing them.
func (s *Server) lister(ctx context.Context, key nsKey) (corelisters.SecretNamespaceLister, Authorizer, error) {
	s.mu.Lock()
	n := s.namespaces[key]
	s.mu.Unlock()
	switch {
	case n == nil:
		return nil, nil, errNotFound
	case n.factory == nil:
		return nil, nil, errUnknownCluster
	}
	select {
	case <-n.synced:
		return n.lister, s.authorizer(n), nil
	default:
	}
	t := time.NewTimer(syncWait)
	defer t.Stop()
	select {
	case <-n.synced:
		return n.lister, s.authorizer(n), nil
	case <-n.forbidden:
		select {
		case <-n.synced: // granted meanwhile
			return n.lister, s.authorizer(n), nil
		default:
		}
		return nil, nil, fmt.Errorf("namespace %s: %w", key.namespace, errListForbidden)
	case <-ctx.Done():
	case <-t.C:
	}
	return nil, nil, errNotFound
}

// authorizer is the permission check of n's cluster.
func (s *Server) authorizer(n *namespaceWatch) Authorizer {
	if n.key.cluster == "" {
		return s.cfg.Authorizer
	}
	return n.authz
}

// countWatchedLocked sets the gauge of namespaces whose Secrets are
// watched (those of an unregistered cluster are not).
func (s *Server) countWatchedLocked() {
	n := 0
	for _, w := range s.namespaces {
		if w.factory != nil {
			n++
		}
	}
	s.watched.Set(float64(n))
}

// reconcile starts the informers of namespaces that got a consumer and
// stops those of namespaces whose consumers are gone.
func (s *Server) reconcile(running *sync.WaitGroup) {
	s.mu.Lock()
	var start []*namespaceWatch
	for _, n := range s.namespaces {
		if !n.started {
			n.started = true
			if n.factory != nil {
				start = append(start, n)
			}
		}
	}
	retired := s.retired
	s.retired = nil
	s.mu.Unlock()
	for _, n := range retired {
		stopWatch(n)
	}
	for _, n := range start {
		n.factory.Start(n.stop)
		running.Go(func() {
			if cache.WaitForCacheSync(n.stop, n.handler.HasSynced) {
				close(n.synced)
			}
		})
	}
}

// stopAll stops every informer, when Run ends.
func (s *Server) stopAll(running *sync.WaitGroup) {
	s.mu.Lock()
	all := s.retired
	s.retired = nil
	for _, n := range s.namespaces {
		all = append(all, n)
	}
	s.mu.Unlock()
	for _, n := range all {
		stopWatch(n)
	}
	running.Wait()
}

// stopWatch stops n's informer if Run started it; only Run's goroutine
// calls it, which alone sets started.
func stopWatch(n *namespaceWatch) {
	if n.started && !n.stopped && n.factory != nil {
		close(n.stop)
		n.factory.Shutdown()
		n.stopped = true
	}
}
