// Package multicluster keeps istiod's registry of remote clusters, read
// from Istio's remote secrets: Secrets labelled istio/multiCluster=true in
// istiod's namespace, each data key a cluster ID and its value a
// kubeconfig, as `istioctl create-remote-secret` writes them.
package multicluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Istio's names for the remote secrets.
const (
	// SecretLabel marks a remote secret (value "true").
	SecretLabel = "istio/multiCluster"
	// ClusterAnnotation is the annotation istioctl sets to the cluster's name.
	ClusterAnnotation = "networking.istio.io/cluster"
)

// Defaults for Config.
const (
	DefaultSyncTimeout = 30 * time.Second
	// DefaultMaxClusters bounds the remote clusters registered at once.
	DefaultMaxClusters = 256
)

// Sync states of a remote cluster, Istio's names.
const (
	StatusSyncing = "syncing"
	StatusSynced  = "synced"
	StatusTimeout = "timeout"
	StatusClosed  = "closed"
)

// maxClusterIDLen bounds a cluster ID (a Secret data key is at most 253).
const maxClusterIDLen = 253

// Config configures a Controller.
type Config struct {
	// Client reads the remote secrets in Namespace.
	Client kubernetes.Interface
	// Namespace is istiod's namespace; remote secrets elsewhere are ignored.
	Namespace string
	// LocalClusterID is istiod's own cluster ID; a remote secret key equal
	// to it is ignored.
	LocalClusterID string
	// Aliases are old cluster IDs standing for current ones (istiod's
	// --clusterAliases); a remote secret key equal to an alias is refused:
	// its tokens and proxies would be the aliased cluster's.
	Aliases map[string]string
	// NewClient builds a remote cluster's client from its sanitized
	// configuration. Default: kubernetes.NewForConfig. It must do no I/O.
	NewClient func(*rest.Config) (kubernetes.Interface, error)
	// SyncTimeout bounds the first contact with a remote API server before
	// the cluster is reported as timed out, and how long istiod's
	// readiness waits for a remote cluster (StartupSynced): Istio's
	// PILOT_REMOTE_CLUSTER_TIMEOUT. Default (0): 30s; negative: no limit,
	// readiness waits for every cluster.
	SyncTimeout time.Duration
	// MaxClusters bounds the remote clusters registered. Default: 256.
	MaxClusters int
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs; nil discards.
	Logger *slog.Logger
}

// Cluster is a registered remote cluster.
type Cluster struct {
	ID string
	// Secret is the namespace/name of the remote secret that registered it.
	Secret types.NamespacedName
	// Client talks to the cluster's API server; each request times out.
	Client kubernetes.Interface
	// watch is Client without the time limit, for informers.
	watch kubernetes.Interface

	sum    [32]byte
	status string
	stop   context.CancelFunc
	// added is when the cluster was registered (its credentials last
	// replaced).
	added time.Time
}

// ClusterHandler is told of the remote clusters as they are registered
// (again when a cluster's client is replaced) and withdrawn. Its methods
// are called with the registry locked: they must not block, nor call the
// Controller. The client ClusterAdded gets is for informers: its requests
// have no overall time limit (a watch is one long request), unlike
// Cluster.Client's, so it must be used with a context that ends.
type ClusterHandler interface {
	ClusterAdded(id string, client kubernetes.Interface)
	ClusterRemoved(id string)
}

// Controller watches the remote secrets and keeps the registry of remote
// clusters. Lookups are safe for concurrent use and never wait for the API.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	queue   workqueue.TypedRateLimitingInterface[types.NamespacedName]

	mu       sync.RWMutex
	clusters map[string]*Cluster
	// bySecret lists the cluster IDs each secret registered.
	bySecret map[types.NamespacedName][]string
	ctx      context.Context // Run's, for the sync probes
	synced   atomic.Bool
	// initial: the remote secrets listed at startup have been processed.
	initial  atomic.Bool
	handlers []ClusterHandler
}

// Notify has h told of every remote cluster registered or withdrawn from
// now on, and of those registered already.
func (c *Controller) Notify(h ClusterHandler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers = append(c.handlers, h)
	for id, cl := range c.clusters {
		h.ClusterAdded(id, cl.watch)
	}
}

// HasSynced reports whether the remote secrets have been listed once (not
// whether the remote clusters answered).
func (c *Controller) HasSynced() bool { return c.synced.Load() }

// StartupSynced reports whether istiod may call itself ready as far as
// remote clusters go, as Istio's istiod decides it: the remote secrets
// present at startup have been processed, and every registered cluster
// has synced (modelSynced: its Services and endpoints are in the model;
// nil: its API server answered) or has been registered longer than
// SyncTimeout.
func (c *Controller) StartupSynced(modelSynced func(id string) bool) bool {
	if !c.initial.Load() {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	now := time.Now()
	for id, cl := range c.clusters {
		switch {
		case c.cfg.SyncTimeout > 0 && now.Sub(cl.added) >= c.cfg.SyncTimeout:
		case modelSynced != nil && modelSynced(id):
		case modelSynced == nil && cl.status == StatusSynced:
		default:
			return false
		}
	}
	return true
}

// New returns a Controller. It does no I/O and starts nothing.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("multicluster: no client")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("multicluster: no namespace")
	}
	if cfg.NewClient == nil {
		cfg.NewClient = func(rc *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(rc) }
	}
	cfg.SyncTimeout = cmp.Or(cfg.SyncTimeout, DefaultSyncTimeout)
	cfg.MaxClusters = cmp.Or(cfg.MaxClusters, DefaultMaxClusters)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Controller{
		cfg: cfg, log: log, metrics: m,
		clusters: make(map[string]*Cluster),
		bySecret: make(map[types.NamespacedName][]string),
	}, nil
}

// Client returns the client of the remote cluster id, if registered.
func (c *Controller) Client(id string) (kubernetes.Interface, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	cl, ok := c.clusters[id]
	if !ok {
		return nil, false
	}
	return cl.Client, true
}

// Run watches the remote secrets until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "remote-secrets"})
	defer c.queue.ShutDown()
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	defer c.closeAll()

	factory := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0,
		informers.WithNamespace(c.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = SecretLabel + "=true" }))
	inf := factory.Core().V1().Secrets()
	lister := inf.Lister()
	enqueue := func(event string) func(any) {
		return func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			s, ok := obj.(*corev1.Secret)
			if !ok {
				return
			}
			c.metrics.events.WithLabelValues(event).Inc()
			c.queue.Add(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue("add"),
		UpdateFunc: func(_, n any) { enqueue("update")(n) },
		DeleteFunc: enqueue("delete"),
	}); err != nil {
		return fmt.Errorf("remote secrets: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil
	}
	c.synced.Store(true)
	if c.queue.Len() == 0 {
		c.initial.Store(true)
	}
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return nil
		}
		s, err := lister.Secrets(key.Namespace).Get(key.Name)
		if err != nil {
			s = nil // gone: withdraw what it registered
		}
		c.reconcile(key, s)
		c.queue.Done(key)
		c.queue.Forget(key)
		if c.queue.Len() == 0 {
			c.initial.Store(true)
		}
	}
}

// reconcile brings the clusters registered by secret key in line with s
// (nil: deleted).
func (c *Controller) reconcile(key types.NamespacedName, s *corev1.Secret) {
	want := map[string][]byte{}
	if s != nil && s.Labels[SecretLabel] == "true" {
		want = s.Data
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var kept []string
	for _, id := range c.bySecret[key] {
		if _, ok := want[id]; !ok {
			c.removeLocked(id, "remote secret no longer holds it")
		} else {
			kept = append(kept, id)
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if c.addLocked(key, id, want[id]) && !slices.Contains(kept, id) {
			kept = append(kept, id)
		}
	}
	if len(kept) == 0 {
		delete(c.bySecret, key)
	} else {
		c.bySecret[key] = kept
	}
	c.metrics.clusters.WithLabelValues("remote").Set(float64(len(c.clusters)))
}

// addLocked registers or updates cluster id from secret key and reports
// whether the secret owns it afterwards.
func (c *Controller) addLocked(key types.NamespacedName, id string, kubeconfig []byte) bool {
	log := c.log.With("secret", key.String(), "cluster", id)
	switch {
	case id == c.cfg.LocalClusterID:
		log.Info("remote secret names istiod's own cluster: ignored")
		return false
	case id == "" || len(id) > maxClusterIDLen:
		log.Warn("remote secret key is not a usable cluster ID: ignored")
		return false
	}
	if to, ok := c.cfg.Aliases[id]; ok {
		log.Error("remote secret refused: its cluster ID is an alias (--clusterAliases), whose tokens and proxies are the aliased cluster's; "+
			"name the cluster by its current ID", "alias_of", to)
		return false
	}
	sum := sha256.Sum256(kubeconfig)
	cur, exists := c.clusters[id]
	if exists && cur.Secret != key {
		log.Error("remote secret refused: cluster ID already registered by another secret; delete one of them",
			"registered_by", cur.Secret.String())
		return false
	}
	if exists && cur.sum == sum {
		return true
	}
	if !exists && len(c.clusters) >= c.cfg.MaxClusters {
		log.Error("remote secret refused: too many remote clusters", "limit", c.cfg.MaxClusters)
		return false
	}
	rc, err := RESTConfig(kubeconfig)
	if err != nil {
		// A changed kubeconfig that is refused leaves the cluster as it
		// was, so a bad edit does not cut a working cluster off.
		log.Error("remote secret refused", "err", err)
		return exists
	}
	client, err := c.cfg.NewClient(rc)
	if err != nil {
		log.Error("remote secret refused: build client", "err", err)
		return exists
	}
	wc := rest.CopyConfig(rc)
	wc.Timeout = 0
	watch, err := c.cfg.NewClient(wc)
	if err != nil {
		log.Error("remote secret refused: build client", "err", err)
		return exists
	}
	next := &Cluster{ID: id, Secret: key, Client: client, watch: watch, sum: sum, status: StatusSyncing, added: time.Now()}
	// The new client replaces the old one in one step: a lookup gets one or
	// the other, never neither.
	c.clusters[id] = next
	for _, h := range c.handlers {
		h.ClusterAdded(id, watch)
	}
	if exists {
		cur.stop()
		log.Info("remote cluster credentials changed: client replaced")
	} else {
		log.Info("remote cluster added", "server", rc.Host)
	}
	c.startProbe(next)
	return true
}

// removeLocked withdraws cluster id.
func (c *Controller) removeLocked(id, why string) {
	cl, ok := c.clusters[id]
	if !ok {
		return
	}
	cl.stop()
	delete(c.clusters, id)
	for _, h := range c.handlers {
		h.ClusterRemoved(id)
	}
	c.metrics.setStatus(id, StatusClosed)
	c.log.Info("remote cluster removed", "cluster", id, "secret", cl.Secret.String(), "reason", why)
}

// closeAll withdraws every cluster when Run ends.
func (c *Controller) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.clusters {
		c.removeLocked(id, "istiod stopping")
	}
	clear(c.bySecret)
	c.metrics.clusters.WithLabelValues("remote").Set(0)
}

// startProbe asks the new cluster's API server for its version, in the
// background: the cluster is synced once it answers, timed out when it has
// not within SyncTimeout (the probe goes on, and a late answer still makes
// it synced), closed when withdrawn.
func (c *Controller) startProbe(cl *Cluster) {
	parent := c.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	cl.stop = cancel
	c.metrics.setStatus(cl.ID, StatusSyncing)
	stopTimer := func() bool { return false } // no limit
	if c.cfg.SyncTimeout > 0 {
		stopTimer = time.AfterFunc(c.cfg.SyncTimeout, func() {
			if c.setStatus(cl, StatusSyncing, StatusTimeout) {
				c.metrics.timeouts.Inc()
				c.log.Warn("remote cluster did not answer in time", "cluster", cl.ID, "timeout", c.cfg.SyncTimeout)
			}
		}).Stop
	}
	go func() {
		defer cancel()
		if probe(ctx, cl.Client) == nil {
			stopTimer()
			c.setStatus(cl, "", StatusSynced)
		}
	}()
}

// setStatus moves cl, if still registered, to status, from status from
// (any when empty), and reports whether it did.
func (c *Controller) setStatus(cl *Cluster, from, to string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clusters[cl.ID] != cl || (from != "" && cl.status != from) {
		return false
	}
	cl.status = to
	c.metrics.setStatus(cl.ID, to)
	return true
}

// probeRetry spaces the contacts with a remote that refused.
const probeRetry = time.Second

// maxVersionBody bounds the /version answer a remote may send.
const maxVersionBody = 64 << 10

// probe asks for the server version until a well-formed one comes back or
// ctx ends: an answer that is not a Kubernetes version is no answer.
func probe(ctx context.Context, client kubernetes.Interface) error {
	for {
		rc := client.Discovery().RESTClient()
		var err error
		if rc == nil {
			_, err = client.Discovery().ServerVersion()
		} else {
			err = versionOf(rc.Get().AbsPath("/version").Do(ctx).Raw())
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(probeRetry):
		}
	}
}

// versionOf checks a /version answer.
func versionOf(body []byte, err error) error {
	if err != nil {
		return err
	}
	if len(body) > maxVersionBody {
		return fmt.Errorf("version: %d bytes, limit %d", len(body), maxVersionBody)
	}
	var v version.Info
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	if v.GitVersion == "" {
		return errors.New("version: no gitVersion")
	}
	return nil
}
