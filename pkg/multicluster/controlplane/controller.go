// Package controlplane decides, for each remote cluster, whether this
// istiod is its control plane (Istio's primary-remote), and runs the
// duties of one while it is.
//
// A remote cluster is controlled when its namespace of istiod's name
// carries the annotation topology.istio.io/controlPlaneClusters naming
// this istiod's cluster ID, or "*", as Istio's istiod decides it. Istio
// reads the annotation once, when the cluster is added; here it is
// watched, so the duties stop as soon as the annotation goes, the
// namespace is deleted or the remote cluster is withdrawn. Nothing is
// written into a remote cluster that is not controlled: the duties are
// not started.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
)

// Annotation is Istio's annotation on a remote cluster's istiod namespace
// naming the clusters whose istiod controls it, comma-separated.
const Annotation = "topology.istio.io/controlPlaneClusters"

// Controls reports whether an Annotation value names clusterID: one of
// its comma-separated items is clusterID or "*". Items are compared as
// they are, without trimming spaces, as Istio compares them.
func Controls(value, clusterID string) bool {
	for item := range strings.SplitSeq(value, ",") {
		if item == "*" || (item != "" && item == clusterID) {
			return true
		}
	}
	return false
}

// Duty is what this istiod does for a remote cluster it controls: it runs
// until ctx ends and must then return. client is the remote cluster's,
// without an overall request time limit (for informers and leader
// election).
type Duty func(ctx context.Context, cluster string, client kubernetes.Interface)

// Config configures a Controller.
type Config struct {
	// ClusterID is this istiod's cluster ID.
	ClusterID string
	// Namespace is istiod's namespace; the remote cluster's namespace of
	// that name carries the annotation.
	Namespace string
	// Duty runs for each controlled remote cluster.
	Duty Duty
	// Registerer receives the metric; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs; nil discards.
	Logger *slog.Logger
}

// Controller watches the remote clusters' istiod namespaces. It is told
// of remote clusters as a multicluster.ClusterHandler.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	metric  *prometheus.GaugeVec
	mu      sync.Mutex
	ctx     context.Context // Run's; nil before Run
	remotes map[string]*remote
	// controlled are the clusters whose duties run, with the duty.
	controlled map[string]*duty
	// wg counts the watches; stopped: Run is waiting for them, none starts.
	wg      sync.WaitGroup
	stopped bool
}

// remote is one remote cluster's watch: a client, and the goroutine that
// watches its namespace and runs the duties.
type remote struct {
	client kubernetes.Interface
	cancel context.CancelFunc
}

// New returns a Controller. It does no I/O and starts nothing.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.ClusterID == "":
		return nil, errors.New("control plane of remote clusters: no cluster ID")
	case cfg.Namespace == "":
		return nil, errors.New("control plane of remote clusters: no namespace")
	case cfg.Duty == nil:
		return nil, errors.New("control plane of remote clusters: no duty")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bulwark_remote_cluster_controlled",
		Help: "1 while this istiod is the control plane of the remote cluster (its istiod namespace annotated " + Annotation + " naming this cluster): it writes istio-ca-root-cert and the webhook caBundles there; 0 otherwise.",
	}, []string{"cluster"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(m); err != nil {
			return nil, fmt.Errorf("control plane of remote clusters: metrics: %w", err)
		}
	}
	return &Controller{cfg: cfg, log: log, metric: m, remotes: map[string]*remote{}, controlled: map[string]*duty{}}, nil
}

// ClusterAdded starts watching cluster id (again, with client, when its
// client was replaced). It does not block.
func (c *Controller) ClusterAdded(id string, client kubernetes.Interface) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.remotes[id]; old != nil && old.cancel != nil {
		old.cancel()
	}
	r := &remote{client: client}
	c.remotes[id] = r
	if c.ctx != nil {
		c.startLocked(id, r)
	}
}

// ClusterRemoved stops the duties of cluster id. It does not block.
func (c *Controller) ClusterRemoved(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.remotes[id]; r != nil && r.cancel != nil {
		r.cancel()
	}
	delete(c.remotes, id)
	c.metric.DeleteLabelValues(id)
}

// Controlled lists the remote clusters whose duties run now.
func (c *Controller) Controlled() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.controlled))
}

// Run watches the remote clusters until ctx ends, and returns once every
// duty has stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	for id, r := range c.remotes {
		c.startLocked(id, r)
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}
