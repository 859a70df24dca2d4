package kubesource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Defaults of Config's optional knobs.
const (
	DefaultDelay      = 20 * time.Millisecond
	DefaultSyncReport = 10 * time.Second
	DefaultCRDPoll    = 10 * time.Second
)

// syncPoll is how often Run checks whether caches have synced.
const syncPoll = 10 * time.Millisecond

// Config configures a Source.
type Config struct {
	// Client reads the Kubernetes resources; its Discovery tells which
	// Istio CRDs the apiserver serves.
	Client kubernetes.Interface
	// Istio reads the Istio kinds; unused, and may be nil, with
	// EndpointsOnly.
	Istio     versioned.Interface
	Publisher model.Publisher
	Options   model.Options
	Logger    *slog.Logger
	// Delay is the least time between two rebuilds; events within it
	// coalesce into one rebuild. When a rebuild takes longer, the next one
	// waits that long instead, so rebuilding takes at most about half a
	// CPU however busy the cluster. Default DefaultDelay.
	Delay time.Duration
	// SyncReport is how often Run logs the informers that have not synced
	// yet, for example because RBAC forbids listing one. Default
	// DefaultSyncReport.
	SyncReport time.Duration
	// CRDPoll is how often Run asks the apiserver's discovery again for
	// the Istio CRDs not installed yet, and retries a discovery that
	// failed. Default DefaultCRDPoll.
	CRDPoll time.Duration
	// ClusterID is the ID of the cluster read. When set, every endpoint
	// carries it (Endpoint.Cluster, and label topology.istio.io/cluster,
	// as Istio adds it, for DestinationRule subsets).
	ClusterID string
	// Network is the cluster's network (meshNetworks' fromRegistry): the
	// network of its endpoints whose pod has no topology.istio.io/network
	// label. Empty: those have none.
	Network string
	// SystemNamespace is istiod's namespace in the cluster read: its
	// topology.istio.io/network label, when set, is the cluster's network
	// instead of Network, as Istio reads it. Empty: not watched.
	SystemNamespace string
	// EndpointsOnly reads only Services, EndpointSlices, Pods and Nodes,
	// never the Istio kinds: a remote cluster's part of the model, as
	// Istio reads only the discovery objects of a remote cluster.
	EndpointsOnly bool
}

// Source publishes snapshots of the cluster's services, endpoints and
// policies.
type Source struct {
	cfg     Config
	dirty   chan struct{} // one pending rebuild, set by informer handlers
	mu      sync.Mutex
	touched *touched // what events changed since the last rebuild; guarded by mu
	network string   // the cluster's network, SetNetwork's; guarded by mu
	// nsNetwork is the system namespace's network label, which wins over
	// network; guarded by mu.
	nsNetwork string
	started   atomic.Bool
	synced    atomic.Bool
	last      string // version last published; Run's goroutine only
	reuse     reuse  // what the last rebuild made; Run's goroutine only
	// afterBuild, when set (by tests), sees the caches of every rebuild and
	// whether it published.
	afterBuild func(l listers, published bool)
}

// New returns a source for cfg. It does no I/O and starts no goroutines.
func New(cfg Config) (*Source, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubesource: Config.Client is nil")
	case cfg.Istio == nil && !cfg.EndpointsOnly:
		return nil, errors.New("kubesource: Config.Istio is nil")
	case cfg.Publisher == nil:
		return nil, errors.New("kubesource: Config.Publisher is nil")
	case cfg.Delay < 0 || cfg.SyncReport < 0 || cfg.CRDPoll < 0:
		return nil, errors.New("kubesource: negative Delay, SyncReport or CRDPoll")
	}
	cfg.Delay = cmp.Or(cfg.Delay, DefaultDelay)
	cfg.SyncReport = cmp.Or(cfg.SyncReport, DefaultSyncReport)
	cfg.CRDPoll = cmp.Or(cfg.CRDPoll, DefaultCRDPoll)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	src := &Source{cfg: cfg, dirty: make(chan struct{}, 1), touched: &touched{}, network: cfg.Network}
	src.reuse.topo = topology{cluster: cfg.ClusterID, network: cfg.Network}
	return src, nil
}

// HasSynced reports whether the first snapshot built from synced caches has
// been published.
func (s *Source) HasSynced() bool { return s.synced.Load() }

// Run asks the apiserver which Istio CRDs it serves, starts the informers
// of what it serves, publishes a snapshot once all their caches have synced
// and again after every change, until ctx is done. It keeps asking for the
// CRDs not installed and starts watching each once it is. It may be called
// once.
func (s *Source) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("kubesource: Run called twice")
	}
	inf, err := newInformers(s.cfg.Client, s.cfg.Istio, s.cfg.EndpointsOnly, s.cfg.Logger, s.touch)
	if err != nil {
		return fmt.Errorf("kubesource: %w", err)
	}
	inf.start(ctx.Done())
	defer inf.shutdown()
	nsCtx, nsCancel := context.WithCancel(ctx)
	defer nsCancel()
	stopNamespace, err := s.watchSystemNamespace(nsCtx.Done())
	if err != nil {
		return fmt.Errorf("kubesource: %w", err)
	}
	defer func() { nsCancel(); stopNamespace() }()
	t := s.newTickers()
	defer t.stop()
	if synced, err := s.waitForSync(ctx, inf, t); !synced || err != nil {
		return err
	}
	took := s.rebuild(inf.listers)
	s.synced.Store(true)
	s.cfg.Logger.Info("mesh model synced from Kubernetes", "version", s.last)
	delay := time.NewTimer(0)
	<-delay.C
	for {
		if rebuild, err := s.next(ctx, inf, t); !rebuild || err != nil {
			return err
		}
		delay.Reset(max(s.cfg.Delay, took))
		select {
		case <-ctx.Done():
			delay.Stop()
			return nil
		case <-delay.C:
		}
		took = s.rebuild(inf.listers)
	}
}

// tickers pace Run's periodic work.
type tickers struct {
	report *time.Ticker // logs what has not synced
	crd    *time.Ticker // discovery of missing CRDs
	poll   *time.Ticker // sync of staged informers; stopped when none
}

func (s *Source) newTickers() *tickers {
	return &tickers{
		report: time.NewTicker(s.cfg.SyncReport),
		crd:    time.NewTicker(s.cfg.CRDPoll),
		poll:   time.NewTicker(syncPoll),
	}
}

func (t *tickers) stop() {
	t.report.Stop()
	t.crd.Stop()
	t.poll.Stop()
}

// next waits for a change to rebuild for, meanwhile discovering CRDs that
// appear, promoting their informers once synced and logging those that do
// not sync. It is false when ctx ends first; its error is fatal.
func (s *Source) next(ctx context.Context, inf *informers, t *tickers) (bool, error) {
	for {
		if len(inf.staged) == 0 {
			t.poll.Stop()
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-s.dirty:
			return true, nil
		case <-t.crd.C:
			if err := s.discover(ctx, inf, t); err != nil {
				return false, err
			}
		case <-t.poll.C:
			if inf.promote() {
				s.touchAll() // a cache the build has not read yet
				return true, nil
			}
		case <-t.report.C:
			if pending := inf.unsynced(); len(pending) > 0 {
				s.cfg.Logger.Warn("waiting for Kubernetes caches to sync; their policies do not apply until they do",
					"pending", pending)
			}
		}
	}
}

// touch records what an informer event changed and asks for a rebuild.
func (s *Source) touch(objs ...any) {
	s.mu.Lock()
	for _, o := range objs {
		s.touched.add(o)
	}
	s.mu.Unlock()
	s.markDirty()
}

// SetNetwork makes network the cluster's network (Config.Network), as
// meshNetworks' fromRegistry changes: every endpoint whose pod names no
// network is placed again, in a rebuild of everything. Safe for
// concurrent use; it does not block.
func (s *Source) SetNetwork(network string) {
	s.mu.Lock()
	if network == s.network {
		s.mu.Unlock()
		return
	}
	s.network = network
	s.touched.all = true
	s.mu.Unlock()
	s.markDirty()
}

// touchAll asks for a rebuild of everything.
func (s *Source) touchAll() {
	s.mu.Lock()
	s.touched.all = true
	s.mu.Unlock()
	s.markDirty()
}

// markDirty asks for a rebuild. It never blocks: one pending request
// stands for any number of events.
func (s *Source) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// discover asks the apiserver for the missing Istio CRDs and starts the
// informers of those it serves. A discovery failure is logged, and retried
// at the next CRDPoll tick; other errors are fatal.
func (s *Source) discover(ctx context.Context, inf *informers, t *tickers) error {
	before := len(inf.staged)
	err := inf.discover(s.cfg.Client.Discovery(), ctx.Done())
	if errors.Is(err, errDiscovery) {
		s.cfg.Logger.Warn("Kubernetes discovery failed; retrying", "err", err, "retryIn", s.cfg.CRDPoll)
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubesource: %w", err)
	}
	if len(inf.staged) > before {
		t.poll.Reset(syncPoll) // stopped by next while nothing was staged
	}
	return nil
}

// waitForSync discovers the Istio CRDs, retrying until discovery answers,
// and waits for every informer's cache, logging the ones still missing
// every SyncReport. It is false when ctx ends first; its error is fatal.
func (s *Source) waitForSync(ctx context.Context, inf *informers, t *tickers) (bool, error) {
	if err := s.discover(ctx, inf, t); err != nil {
		return false, err
	}
	t.poll.Reset(syncPoll)
	for {
		inf.promote()
		if inf.synced() {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.report.C:
			if s.cfg.EndpointsOnly {
				s.cfg.Logger.Warn("waiting for Kubernetes caches to sync; is the API server reachable, and may istiod list them?",
					"pending", inf.unsynced())
				break
			}
			s.cfg.Logger.Warn("waiting for Kubernetes caches to sync; are the Istio CRDs readable?",
				"pending", inf.unsynced(), "discovered", inf.discovered)
		case <-t.crd.C:
			if err := s.discover(ctx, inf, t); err != nil {
				return false, err
			}
		case <-t.poll.C:
		}
	}
}

// rebuild builds a snapshot and publishes it when its version is new. It
// returns how long building took.
func (s *Source) rebuild(l listers) time.Duration {
	began := time.Now()
	s.mu.Lock()
	t := s.touched
	s.touched = &touched{}
	network := cmp.Or(s.nsNetwork, s.network)
	s.mu.Unlock()
	if network != s.reuse.topo.network {
		// What endpoints took from their pods holds the old network.
		s.reuse.topo.network = network
		s.reuse.workloads = memo[*corev1.Pod, *workload]{}
		t.all = true
	}
	snap := buildReusing(l, s.cfg.Options, &s.reuse, t)
	took := time.Since(began)
	published := snap.Version != s.last
	if s.afterBuild != nil {
		defer s.afterBuild(l, published)
	}
	if !published {
		return took
	}
	s.last = snap.Version
	s.cfg.Publisher.Publish(snap)
	res := snap.Resources()
	s.cfg.Logger.Debug("mesh model published", "version", snap.Version,
		"services", len(res.Services), "peerAuthentications", len(res.PeerAuthentications),
		"authorizationPolicies", len(res.AuthorizationPolicies), "destinationRules", len(res.DestinationRules),
		"gateways", len(res.Gateways), "virtualServices", len(res.VirtualServices),
		"serviceEntries", len(res.ServiceEntries), "telemetries", len(res.Telemetries),
		"serviceEntries", len(res.ServiceEntries), "sidecars", len(res.Sidecars),
		"took", took)
	return took
}
