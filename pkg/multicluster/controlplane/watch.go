package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Log lines of the decision, for the operator and for tests.
const (
	LogControlled    = "remote cluster controlled by this istiod: writing istio-ca-root-cert and the webhook caBundles there"
	LogNotControlled = "remote cluster not controlled by this istiod: nothing is written there"
)

// syncWarning is how long the namespace may stay unread before a warning.
const syncWarning = 30 * time.Second

// startLocked starts the watch of cluster id, unless Run has ended.
func (c *Controller) startLocked(id string, r *remote) {
	if c.stopped || c.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	r.cancel = cancel
	c.wg.Go(func() {
		defer cancel()
		c.watch(ctx, id, r)
	})
}

// watch follows the remote cluster's istiod namespace, running the duty
// while the namespace's annotation names this cluster, until ctx ends.
func (c *Controller) watch(ctx context.Context, id string, r *remote) {
	log := c.log.With("cluster", id, "namespace", c.cfg.Namespace)
	inf := coreinformers.NewFilteredNamespaceInformer(r.client, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.cfg.Namespace).String()
	})
	kick := make(chan struct{}, 1)
	notify := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
		DeleteFunc: notify,
	}); err != nil {
		log.Error("cannot watch the remote cluster's istiod namespace", "err", err)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { inf.RunWithContext(ctx) })
	// A namespace that cannot be read (the remote's reader lacks the
	// primary-remote rules, or its API server does not answer) leaves the
	// cluster not controlled; say so once, rather than nothing.
	unread := time.AfterFunc(syncWarning, func() {
		log.Warn(LogNotControlled, "reason", "the remote cluster's istiod namespace cannot be read yet (does its reader have the primary-remote rules of docs/rbac.md?)")
	})
	synced := cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	unread.Stop()
	if !synced {
		return
	}
	d := &duty{}
	defer c.stopDuty(id, r, d, log, "remote cluster withdrawn, its client replaced, or istiod stopping")
	// last is the reason last logged for not controlling the cluster: a
	// new reason is logged once.
	last := ""
	for {
		controls, why := c.decide(inf.GetStore(), id)
		switch {
		case controls && d.cancel == nil:
			c.startDuty(ctx, id, r, d, log)
			last = ""
		case !controls && d.cancel != nil:
			c.stopDuty(id, r, d, log, why)
			last = why
		case !controls && why != last:
			log.Info(LogNotControlled, "reason", why)
			c.setMetric(id, r, 0)
			last = why
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
	}
}

// decide reads the namespace from the cache: whether its annotation names
// this cluster, and if not, why.
func (c *Controller) decide(store cache.Store, id string) (bool, string) {
	obj, ok, err := store.GetByKey(c.cfg.Namespace)
	if err != nil || !ok {
		return false, "no namespace " + c.cfg.Namespace
	}
	ns, isNS := obj.(*corev1.Namespace)
	if !isNS {
		return false, "no namespace " + c.cfg.Namespace
	}
	v, found := ns.Annotations[Annotation]
	switch {
	case !found:
		return false, "namespace not annotated " + Annotation
	case !Controls(v, c.cfg.ClusterID):
		return false, fmt.Sprintf("%s names other clusters: %q", Annotation, truncate(v, 256))
	}
	return true, ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// duty is a running duty: cancel stops it, done closes when it returned.
type duty struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *Controller) startDuty(ctx context.Context, id string, r *remote, d *duty, log *slog.Logger) {
	dctx, cancel := context.WithCancel(ctx)
	d.cancel, d.done = cancel, make(chan struct{})
	c.mu.Lock()
	if c.remotes[id] == r {
		c.controlled[id] = d
		c.metric.WithLabelValues(id).Set(1)
	}
	c.mu.Unlock()
	log.Info(LogControlled)
	done, client := d.done, r.client
	go func() {
		defer close(done)
		c.cfg.Duty(dctx, id, client)
	}()
}

// stopDuty stops a running duty and waits for it to return.
func (c *Controller) stopDuty(id string, r *remote, d *duty, log *slog.Logger, why string) {
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	c.mu.Lock()
	if c.controlled[id] == d {
		delete(c.controlled, id)
	}
	c.mu.Unlock()
	d.cancel, d.done = nil, nil
	c.setMetric(id, r, 0)
	log.Info(LogNotControlled, "reason", why)
}

// setMetric sets cluster id's gauge, if r is still its watch.
func (c *Controller) setMetric(id string, r *remote, v float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.remotes[id] == r {
		c.metric.WithLabelValues(id).Set(v)
	}
}
