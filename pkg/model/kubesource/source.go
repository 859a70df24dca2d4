package kubesource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Defaults of Config's optional knobs.
const (
	DefaultDelay      = 20 * time.Millisecond
	DefaultSyncReport = 10 * time.Second
)

// Config configures a Source.
type Config struct {
	Client    kubernetes.Interface
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
	// yet, for example because a CRD is missing. Default DefaultSyncReport.
	SyncReport time.Duration
}

// Source publishes snapshots of the cluster's services, endpoints and
// policies.
type Source struct {
	cfg     Config
	dirty   chan struct{} // one pending rebuild, set by informer handlers
	started atomic.Bool
	synced  atomic.Bool
	last    string // version last published; Run's goroutine only
	// afterBuild, when set (by tests), sees the caches of every rebuild and
	// whether it published.
	afterBuild func(l listers, published bool)
}

// New returns a source for cfg. It does no I/O and starts no goroutines.
func New(cfg Config) (*Source, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubesource: Config.Client is nil")
	case cfg.Istio == nil:
		return nil, errors.New("kubesource: Config.Istio is nil")
	case cfg.Publisher == nil:
		return nil, errors.New("kubesource: Config.Publisher is nil")
	case cfg.Delay < 0 || cfg.SyncReport < 0:
		return nil, errors.New("kubesource: negative Delay or SyncReport")
	}
	cfg.Delay = cmp.Or(cfg.Delay, DefaultDelay)
	cfg.SyncReport = cmp.Or(cfg.SyncReport, DefaultSyncReport)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Source{cfg: cfg, dirty: make(chan struct{}, 1)}, nil
}

// HasSynced reports whether the first snapshot built from synced caches has
// been published.
func (s *Source) HasSynced() bool { return s.synced.Load() }

// Run starts the informers, publishes a snapshot once all their caches have
// synced and again after every change, until ctx is done. It may be called
// once.
func (s *Source) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("kubesource: Run called twice")
	}
	inf, err := newInformers(s.cfg.Client, s.cfg.Istio, s.cfg.Logger, s.markDirty)
	if err != nil {
		return fmt.Errorf("kubesource: %w", err)
	}
	inf.start(ctx.Done())
	defer inf.shutdown()
	if !s.waitForSync(ctx, inf) {
		return nil
	}
	took := s.rebuild(inf.listers)
	s.synced.Store(true)
	s.cfg.Logger.Info("mesh model synced from Kubernetes", "version", s.last)
	delay := time.NewTimer(0)
	<-delay.C
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.dirty:
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

// markDirty asks for a rebuild. It never blocks: one pending request
// stands for any number of events.
func (s *Source) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// waitForSync waits for every informer's cache, logging the ones still
// missing every SyncReport. It is false when ctx ends first.
func (s *Source) waitForSync(ctx context.Context, inf *informers) bool {
	tick := time.NewTicker(s.cfg.SyncReport)
	defer tick.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		pending := inf.unsynced()
		if len(pending) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			s.cfg.Logger.Warn("waiting for Kubernetes caches to sync; are the Istio CRDs installed and readable?",
				"pending", pending)
		case <-poll.C:
		}
	}
}

// rebuild builds a snapshot and publishes it when its version is new. It
// returns how long building took.
func (s *Source) rebuild(l listers) time.Duration {
	began := time.Now()
	snap := build(l, s.cfg.Options)
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
		"took", took)
	return took
}
