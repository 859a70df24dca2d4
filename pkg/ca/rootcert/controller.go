// Package rootcert publishes the trust bundle to workloads as the
// ConfigMap istio-ca-root-cert in every namespace, as Istio's namespace
// controller does: istio-proxy mounts it to verify istiod before it has a
// certificate of its own.
//
// Every replica watches namespaces and the ConfigMaps, so its caches are
// warm and it reports HasSynced; only the replica holding the Lease
// istio-namespace-controller-election writes. A replica that loses the
// Lease stops writing and campaigns again.
package rootcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// Controller keeps istio-ca-root-cert in every namespace equal to the
// current trust bundle. Create it with New, then Run it.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	identity string

	namespaceInformer cache.SharedIndexInformer
	configMapInformer cache.SharedIndexInformer
	namespaces        corelisters.NamespaceLister
	configMaps        corelisters.ConfigMapLister

	bundle atomic.Pointer[ca.Bundle]
	// term is the work queue of the current leadership term; nil while
	// another replica leads.
	term atomic.Pointer[term]
}

type term struct {
	queue workqueue.TypedRateLimitingInterface[string]
}

// New builds a controller. It does no I/O and starts nothing.
func New(cfg Config) (*Controller, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new root cert controller: %w", err)
	}
	sel, err := cfg.selector()
	if err != nil {
		return nil, fmt.Errorf("new root cert controller: %w", err)
	}
	c := &Controller{
		cfg:      cfg,
		identity: uniqueIdentity(cfg.Identity),
		namespaceInformer: coreinformers.NewFilteredNamespaceInformer(
			cfg.Client, 0, cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }),
		configMapInformer: coreinformers.NewFilteredConfigMapInformer(
			cfg.Client, metav1.NamespaceAll, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConfigMapName).String()
			}),
	}
	c.log = cfg.Logger.With("component", "rootcert", "identity", c.identity)
	c.namespaces = corelisters.NewNamespaceLister(c.namespaceInformer.GetIndexer())
	c.configMaps = corelisters.NewConfigMapLister(c.configMapInformer.GetIndexer())
	for _, inf := range []cache.SharedIndexInformer{c.namespaceInformer, c.configMapInformer} {
		if err := inf.SetTransform(dropManagedFields); err != nil {
			return nil, fmt.Errorf("new root cert controller: %w", err)
		}
	}
	if _, err := c.namespaceInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueObject(obj, namespaceKey) },
		UpdateFunc: func(_, obj any) { c.enqueueObject(obj, namespaceKey) },
	}); err != nil {
		return nil, fmt.Errorf("new root cert controller: %w", err)
	}
	if _, err := c.configMapInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueObject(obj, configMapKey) },
		UpdateFunc: func(_, obj any) { c.enqueueObject(obj, configMapKey) },
		DeleteFunc: func(obj any) { c.enqueueObject(obj, configMapKey) },
	}); err != nil {
		return nil, fmt.Errorf("new root cert controller: %w", err)
	}
	return c, nil
}

// Identity is this replica's name in the Lease.
func (c *Controller) Identity() string { return c.identity }

// HasSynced reports whether the namespace and ConfigMap caches are filled.
func (c *Controller) HasSynced() bool {
	return c.namespaceInformer.HasSynced() && c.configMapInformer.HasSynced()
}

// IsLeader reports whether this replica holds the Lease and writes.
func (c *Controller) IsLeader() bool { return c.term.Load() != nil }

// Run watches namespaces, ConfigMaps and the trust bundle, and campaigns
// for the Lease until ctx is done. It returns nil then: losing the Lease is
// not an error, only a reason to campaign again. Run a Controller once.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { c.namespaceInformer.RunWithContext(ctx) })
	wg.Go(func() { c.configMapInformer.RunWithContext(ctx) })
	wg.Go(func() { c.watchBundle(ctx) })
	err := c.campaign(ctx)
	wg.Wait()
	return err
}

// watchBundle keeps the bundle to distribute and, on each change, has
// every namespace checked.
func (c *Controller) watchBundle(ctx context.Context) {
	updates, cancel := c.cfg.Bundles.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case b, ok := <-updates:
			if !ok {
				return
			}
			if prev := c.bundle.Swap(b); prev == nil || !bytes.Equal(prev.PEM, b.PEM) {
				c.log.Info("trust bundle changed; updating every namespace", "bundle_version", b.Version)
				c.enqueueAll()
			}
		}
	}
}

// lead runs the workers of one leadership term until ctx is done.
func (c *Controller) lead(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "rootcert"},
	)
	c.term.Store(&term{queue: q})
	c.log.Info("leading: distributing the trust bundle", "lease", c.cfg.Namespace+"/"+LeaseName)
	var wg sync.WaitGroup
	// Workers start once the caches are full, so that they never take a
	// ConfigMap missing from a cache for one missing from the cluster.
	if cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		c.enqueueAll()
		for range c.cfg.Workers {
			wg.Go(func() {
				for c.processNext(ctx, q) {
				}
			})
		}
	}
	<-ctx.Done()
	c.term.Store(nil)
	q.ShutDown()
	wg.Wait()
	c.log.Info("stopped leading")
}

func (c *Controller) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	ns, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(ns)
	if ctx.Err() != nil {
		return true
	}
	retry := false
	if err := c.reconcile(ctx, ns); err != nil {
		if ctx.Err() != nil {
			return true
		}
		c.log.Warn("reconcile failed; retrying", "namespace", ns, "retries", q.NumRequeues(ns), "err", err)
		q.AddRateLimited(ns)
		retry = true
	} else {
		q.Forget(ns)
	}
	c.log.Debug(LogChecked, "namespace", ns, "retry", retry)
	return true
}

// LogChecked is the debug line that ends each check of a namespace, once
// its outcome (written or not, retried or not) is settled: whatever the
// check did is done by then. With one worker, namespaces are checked in
// the order their events came.
const LogChecked = "namespace checked"

// enqueue adds a namespace to the current term's queue, if leading.
func (c *Controller) enqueue(ns string) {
	if t := c.term.Load(); t != nil && !c.excluded(ns) {
		t.queue.Add(ns)
	}
}

// enqueueAll adds every known namespace.
func (c *Controller) enqueueAll() {
	if c.term.Load() == nil {
		return
	}
	all, err := c.namespaces.List(labels.Everything())
	if err != nil { // listing a cache cannot fail
		c.log.Error("list namespaces", "err", err)
		return
	}
	for _, ns := range all {
		c.enqueue(ns.Name)
	}
}

func (c *Controller) excluded(ns string) bool { return slices.Contains(c.cfg.ExcludedNamespaces, ns) }

// enqueueObject enqueues the namespace an informer event concerns.
func (c *Controller) enqueueObject(obj any, key func(metav1.Object) string) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	c.enqueue(key(m))
}

func namespaceKey(m metav1.Object) string { return m.GetName() }
func configMapKey(m metav1.Object) string { return m.GetNamespace() }

// dropManagedFields keeps the caches small: the controller never reads them.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// NamespacesWithoutRoot names the namespaces, of those the controller
// serves, whose istio-ca-root-cert does not hold root (or is missing), as
// the caches see them: root rotation waits for them.
func (c *Controller) NamespacesWithoutRoot(root *x509.Certificate) []string {
	all, err := c.namespaces.List(labels.Everything())
	if err != nil { // listing a cache cannot fail
		return nil
	}
	var out []string
	for _, n := range all {
		if c.excluded(n.Name) || terminating(n) {
			continue
		}
		cm, err := c.configMaps.ConfigMaps(n.Name).Get(ConfigMapName)
		if err != nil || !pemHolds(cm.Data[DataKey], root) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// pemHolds reports whether the PEM bundle holds cert.
func pemHolds(bundle string, cert *x509.Certificate) bool {
	rest := []byte(bundle)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" && bytes.Equal(block.Bytes, cert.Raw) {
			return true
		}
	}
}
