package clusters

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
)

// Sources runs one kubesource.Source per remote cluster, reading its
// Services, EndpointSlices, Pods and Nodes (kubesource's EndpointsOnly)
// into the Merger. A remote API server that does not answer, or answers
// what is not Kubernetes, holds back only its own cluster's source: the
// merge takes a cluster's services once its caches have synced, and the
// local model never waits for it.
type Sources struct {
	merger *Merger
	opts   model.Options
	nets   *model.MeshNetworks // the networks of clusters
	log    *slog.Logger
	// systemNamespace is istiod's namespace, whose network label in each
	// cluster is that cluster's network (SetSystemNamespace).
	systemNamespace string
	// newSource builds the source of a remote cluster; tests replace it.
	newSource func(kubesource.Config) (runner, error)

	mu      sync.Mutex
	sources map[string]runner // the running sources, by cluster
	ctx     context.Context   // Run's; nil before
	stopped bool              // Run's context ended: nothing more starts
	pending map[string]kubernetes.Interface
	running map[string]context.CancelFunc
	// published says, per running source, whether it has published its
	// first snapshot: its caches synced.
	published map[string]*atomic.Bool
	wg        sync.WaitGroup // the running sources' goroutines
}

// stopWait is how long Run waits, once its context ends, for the sources
// to stop: one whose API server holds a request is not waited for longer.
const stopWait = 5 * time.Second

type runner interface {
	Run(ctx context.Context) error
}

// networkSetter is a source whose cluster's network can change
// (kubesource.Source).
type networkSetter interface {
	SetNetwork(network string)
}

var _ networkSetter = (*kubesource.Source)(nil)

// NewSources returns the remote sources of m, built with opts (the local
// source's: the same domain). It does no I/O and starts nothing.
func NewSources(m *Merger, opts model.Options, log *slog.Logger) *Sources {
	return NewSourcesWithNetworks(m, opts, nil, log)
}

// NewSourcesWithNetworks is NewSources whose clusters' endpoints are on
// the network of nets whose fromRegistry names their cluster, unless their
// pod names another (topology.istio.io/network).
func NewSourcesWithNetworks(m *Merger, opts model.Options, nets *model.MeshNetworks, log *slog.Logger) *Sources {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sources{merger: m, opts: opts, nets: nets, log: log,
		newSource: func(c kubesource.Config) (runner, error) { return kubesource.New(c) },
		pending:   map[string]kubernetes.Interface{}, running: map[string]context.CancelFunc{}, sources: map[string]runner{},
		published: map[string]*atomic.Bool{}}
}

// SetSystemNamespace makes the topology.istio.io/network label of
// namespace ns in each remote cluster that cluster's network, ahead of
// meshNetworks', as Istio reads its own namespace in every cluster. It is
// called before Run.
func (s *Sources) SetSystemNamespace(ns string) { s.systemNamespace = ns }

// Synced reports whether the source of remote cluster id has published
// its first snapshot into the model: false for a cluster not added, and
// for one whose source was replaced (new credentials) until the new
// source has.
func (s *Sources) Synced(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.published[id]
	return ok && p.Load()
}

// firstPublish notes that its source has published.
type firstPublish struct {
	model.Publisher
	done *atomic.Bool
}

func (p firstPublish) Publish(snap *model.Snapshot) {
	p.Publisher.Publish(snap)
	p.done.Store(true)
}

// ClusterAdded starts reading remote cluster id through client, replacing
// the source it had: the old one stops, and its last snapshot stays in the
// model until the new one's first. It does not block.
func (s *Sources) ClusterAdded(id string, client kubernetes.Interface) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		s.pending[id] = client
		return
	}
	s.startLocked(id, client)
}

// SetNetworks makes nets the meshNetworks the clusters' networks come
// from (fromRegistry): each running source whose cluster's network
// changes places its endpoints again, and a source started later takes
// its network from nets.
func (s *Sources) SetNetworks(nets *model.MeshNetworks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nets = nets
	for id, src := range s.sources {
		if ns, ok := src.(networkSetter); ok {
			ns.SetNetwork(nets.NetworkOfRegistry(id))
		}
	}
}

// ClusterRemoved stops reading remote cluster id and withdraws its
// services and endpoints from the model. It does not block.
func (s *Sources) ClusterRemoved(id string) {
	s.mu.Lock()
	delete(s.pending, id)
	delete(s.published, id)
	if stop, ok := s.running[id]; ok {
		stop()
		delete(s.running, id)
	}
	delete(s.sources, id)
	s.mu.Unlock()
	s.merger.Remove(id)
}

// Run starts the sources of the clusters added so far, and of those added
// later, until ctx ends; then it stops them all.
func (s *Sources) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.ctx != nil {
		s.mu.Unlock()
		return errors.New("clusters: Run called twice")
	}
	s.ctx = ctx
	for id, client := range s.pending {
		s.startLocked(id, client)
	}
	clear(s.pending)
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopWait):
		s.log.Warn("remote clusters' sources not stopped yet; not waiting for them", "waited", stopWait)
	}
	return nil
}

func (s *Sources) startLocked(id string, client kubernetes.Interface) {
	if s.stopped {
		return
	}
	if stop, ok := s.running[id]; ok {
		stop()
		delete(s.running, id)
	}
	delete(s.sources, id)
	log := s.log.With("cluster", id)
	published := new(atomic.Bool)
	s.published[id] = published
	src, err := s.newSource(kubesource.Config{
		Client:          client,
		Publisher:       firstPublish{Publisher: s.merger.Remote(id), done: published},
		Options:         s.opts,
		Logger:          log,
		ClusterID:       id,
		Network:         s.nets.NetworkOfRegistry(id),
		SystemNamespace: s.systemNamespace,
		EndpointsOnly:   true,
	})
	if err != nil {
		log.Error("remote cluster's services not read", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.running[id] = cancel
	s.sources[id] = src
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// Removing a cluster does not wait for this (Run waits, for a
		// while): an API server that hangs may hold a request until its
		// client gives up.
		if err := src.Run(ctx); err != nil {
			log.Error("remote cluster's services no longer read", "err", err)
		}
	}()
}
