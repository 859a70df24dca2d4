package sds

import (
	"bytes"
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// namespaceWatch is the informer of the Secrets of one namespace, which
// runs while a consumer in the namespace asks for a Secret.
type namespaceWatch struct {
	factory   informers.SharedInformerFactory
	informer  cache.SharedIndexInformer
	handler   cache.ResourceEventHandlerRegistration // synced once the listed Secrets are handled
	lister    corelisters.SecretNamespaceLister
	consumers int           // Watches asking for a Secret here; guarded by Server.mu
	started   bool          // by Run; guarded by Server.mu
	stopped   bool          // by Run, whose goroutine alone reads it
	stop      chan struct{} // closed to stop the informer
	synced    chan struct{} // closed once the informer has synced
}

// holdNamespaceLocked counts a consumer in ns, preparing the informer of
// its Secrets for Run to start when it is the first.
func (s *Server) holdNamespaceLocked(ns string) {
	n := s.namespaces[ns]
	if n == nil {
		n = s.newNamespaceWatch(ns)
		s.namespaces[ns] = n
		s.watched.Set(float64(len(s.namespaces)))
		s.wakeLocked()
	}
	n.consumers++
}

// releaseNamespaceLocked uncounts a consumer in ns; the last one's leaving
// hands the informer to Run to stop.
func (s *Server) releaseNamespaceLocked(ns string) {
	n := s.namespaces[ns]
	n.consumers--
	if n.consumers > 0 {
		return
	}
	delete(s.namespaces, ns)
	s.watched.Set(float64(len(s.namespaces)))
	s.retired = append(s.retired, n)
	s.wakeLocked()
}

func (s *Server) wakeLocked() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// newNamespaceWatch builds the informer of ns's Secrets; it does no I/O.
func (s *Server) newNamespaceWatch(ns string) *namespaceWatch {
	factory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0,
		informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = secretSelector }),
		informers.WithTransform(slim))
	inf := factory.Core().V1().Secrets()
	n := &namespaceWatch{
		factory: factory, informer: inf.Informer(), lister: inf.Lister().Secrets(ns),
		stop: make(chan struct{}), synced: make(chan struct{}),
	}
	// Adding a handler fails only on an informer stopped, not on one
	// not yet started.
	n.handler, _ = n.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.secretChanged(obj) },
		UpdateFunc: func(old, cur any) {
			if !sameContent(old, cur) {
				s.secretChanged(cur)
			}
		},
		DeleteFunc: func(obj any) { s.secretChanged(obj) },
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

func (s *Server) secretChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if sec, ok := obj.(*corev1.Secret); ok {
		s.notifySecret(secretKey{sec.Namespace, sec.Name})
	}
}

// lister returns the Secrets of ns once they are listed: false when no
// consumer asks for a Secret of ns, or when they are not listed within
// syncWait.
func (s *Server) lister(ctx context.Context, ns string) (corelisters.SecretNamespaceLister, bool) {
	s.mu.Lock()
	n := s.namespaces[ns]
	s.mu.Unlock()
	if n == nil {
		return nil, false
	}
	select {
	case <-n.synced:
		return n.lister, true
	default:
	}
	t := time.NewTimer(syncWait)
	defer t.Stop()
	select {
	case <-n.synced:
		return n.lister, true
	case <-ctx.Done():
	case <-t.C:
	}
	return nil, false
}

// reconcile starts the informers of namespaces that got a consumer and
// stops those of namespaces whose consumers are gone.
func (s *Server) reconcile(running *sync.WaitGroup) {
	s.mu.Lock()
	var start []*namespaceWatch
	for _, n := range s.namespaces {
		if !n.started {
			n.started = true
			start = append(start, n)
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
	if n.started && !n.stopped {
		close(n.stop)
		n.factory.Shutdown()
		n.stopped = true
	}
}
