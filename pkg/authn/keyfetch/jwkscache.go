package keyfetch

import (
	"context"
	"maps"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/latest"
)

// maxFetchesPerHost bounds the key sets fetched at once from one host.
const maxFetchesPerHost = 4

// JWKSSnapshot is the key sets held at one time: immutable.
type JWKSSnapshot struct {
	// Version changes whenever a document changes.
	Version uint64
	docs    map[JWKSSource]string
}

// JWKS returns the key set of src: the last one fetched, or RejectAllJWKS
// (and false) while none could be.
func (s *JWKSSnapshot) JWKS(src JWKSSource) (string, bool) {
	if s != nil {
		if doc, ok := s.docs[src]; ok {
			return doc, true
		}
	}
	return RejectAllJWKS, false
}

// JWKSCache fetches and refreshes the key sets that configuration wants
// (RequestAuthentication rules without inline keys) and publishes them as
// snapshots. Each wanted key set is fetched on its own schedule: at once,
// then again a refresh interval after its last fetch ended; while it has
// no keys or its last fetch failed, a retry interval after. A refresh
// that fails keeps the keys held, as a fetch of the CSR path does; a key
// set never fetched is RejectAllJWKS. Subscribers hear of every snapshot
// whose documents changed, as soon as a fetch changes one.
//
// Fetches run in Run, at most one per key set at a time and at most
// maxFetchesPerHost at once from one host (that of the key set's URL),
// with the Client's limits and every URL passing the cache's URLRule. A
// key set waits for no other host's: one that never answers holds its
// own fetch for a timeout, and no one else's. A failure is logged with
// the issuer and the reason, never with what was served.
type JWKSCache struct {
	c    *Client
	rule URLRule

	mu      sync.Mutex
	entries map[JWKSSource]*jwksEntry   // the wanted key sets
	hosts   map[string]*hostSlots       // of the hosts being fetched from
	snaps   latest.Value[*JWKSSnapshot] // stored under mu
	wake    chan struct{}               // a key set is wanted, or a fetch ended
}

type jwksEntry struct {
	host   string
	doc    string    // "" until fetched once
	ended  time.Time // when the last fetch ended; zero: none yet
	failed bool      // the last fetch
	busy   bool      // a fetch is running or waiting for its host
}

// hostSlots are the fetches one host may have running at once.
type hostSlots struct {
	sem   chan struct{}
	users int // fetches running or waiting
}

// JWKSCache returns a cache fetching with c, every URL passing rule: for
// RequestAuthentication, URLRule{} unless the operator allows plain http
// to loopback hosts. It does no I/O.
func (c *Client) JWKSCache(rule URLRule) *JWKSCache {
	k := &JWKSCache{
		c: c, rule: rule,
		entries: map[JWKSSource]*jwksEntry{}, hosts: map[string]*hostSlots{},
		wake: make(chan struct{}, 1),
	}
	k.snaps.Store(&JWKSSnapshot{docs: map[JWKSSource]string{}})
	return k
}

// Want sets the key sets to keep: new ones are fetched at once by Run,
// those no longer wanted are forgotten (and leave the next snapshot).
func (k *JWKSCache) Want(srcs []JWKSSource) {
	k.mu.Lock()
	defer k.mu.Unlock()
	wanted := make(map[JWKSSource]bool, len(srcs))
	added := false
	for _, s := range srcs {
		wanted[s] = true
		if k.entries[s] == nil {
			k.entries[s] = &jwksEntry{host: hostOf(s.URL())}
			added = true
		}
	}
	removed := false
	for s := range k.entries {
		if !wanted[s] {
			delete(k.entries, s)
			removed = true
		}
	}
	if removed {
		k.publishLocked()
	}
	if added {
		k.wakeLocked()
	}
}

// Current returns the key sets held.
func (k *JWKSCache) Current() *JWKSSnapshot {
	snap, _ := k.snaps.Load()
	return snap
}

// Subscribe returns a channel that receives snapshots whose documents
// changed (the latest only, when the reader is slow), and a cancel
// function, which closes the channel.
func (k *JWKSCache) Subscribe() (<-chan *JWKSSnapshot, func()) {
	return k.snaps.Subscribe(false)
}

// Run fetches each key set when it is due until ctx is done, and returns
// once its fetches have stopped.
func (k *JWKSCache) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next, ok := k.startDue(ctx, &wg)
		var at <-chan time.Time
		if ok {
			timer.Reset(next)
			at = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-at:
		case <-k.wake:
		}
	}
}

// RefreshDue starts a fetch of every wanted key set that is due and not
// being fetched already, and waits for those. Each result is published
// as it comes, not when the last one does.
func (k *JWKSCache) RefreshDue(ctx context.Context) {
	var wg sync.WaitGroup
	k.startDue(ctx, &wg)
	wg.Wait()
}

// startDue starts a fetch of each key set that is due and not being
// fetched, and returns the time until the next of the others is due
// (false when none will be before a fetch ends or a key set is wanted).
func (k *JWKSCache) startDue(ctx context.Context, wg *sync.WaitGroup) (time.Duration, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.c.cfg.Clock()
	var next time.Duration
	found := false
	for src, e := range k.entries {
		if e.busy {
			continue
		}
		if wait := k.dueIn(e, now); wait > 0 {
			if !found || wait < next {
				next, found = wait, true
			}
			continue
		}
		e.busy = true
		slots := k.hosts[e.host]
		if slots == nil {
			slots = &hostSlots{sem: make(chan struct{}, maxFetchesPerHost)}
			k.hosts[e.host] = slots
		}
		slots.users++
		wg.Go(func() { k.fetch(ctx, src, e, slots) })
	}
	return next, found
}

// dueIn is the time until e is due at now; at most 0 when it is.
func (k *JWKSCache) dueIn(e *jwksEntry, now time.Time) time.Duration {
	if e.ended.IsZero() {
		return 0
	}
	wait := k.c.cfg.RefreshInterval
	if e.doc == "" || e.failed {
		wait = k.c.cfg.RetryInterval
	}
	return e.ended.Add(wait).Sub(now)
}

// fetch fetches src once a slot of its host is free, and records the
// outcome in e unless src is no longer wanted.
func (k *JWKSCache) fetch(ctx context.Context, src JWKSSource, e *jwksEntry, slots *hostSlots) {
	select {
	case slots.sem <- struct{}{}:
		doc, err := k.c.FetchJWKS(ctx, src, k.rule)
		<-slots.sem
		k.record(src, e, doc, err)
	case <-ctx.Done():
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e.busy = false
	if slots.users--; slots.users == 0 {
		delete(k.hosts, e.host)
	}
	k.wakeLocked()
}

// record keeps the outcome of a fetch of src into e, and publishes a
// snapshot when the document changed.
func (k *JWKSCache) record(src JWKSSource, e *jwksEntry, doc string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e.ended, e.failed = k.c.cfg.Clock(), err != nil
	if k.entries[src] != e {
		return // no longer wanted
	}
	if err != nil {
		held := "no keys held: its tokens are refused"
		if e.doc != "" {
			held = "the keys fetched before are kept"
		}
		k.c.cfg.Logger.Warn("fetching a RequestAuthentication key set failed", "issuer", src.Issuer, "error", err, "effect", held)
		return
	}
	if e.doc != doc {
		k.c.cfg.Logger.Info("fetched a RequestAuthentication key set", "issuer", src.Issuer, "source", src.String(), "changed", e.doc != "")
		e.doc = doc
		k.publishLocked()
	}
}

func (k *JWKSCache) wakeLocked() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// hostOf is the host a URL is fetched from, as the per-host limit counts
// it; "" for what is not a URL (its fetch fails at once).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// publishLocked makes a snapshot of the fetched documents and hands it to
// every subscriber, replacing one it has not read yet.
func (k *JWKSCache) publishLocked() {
	docs := make(map[JWKSSource]string, len(k.entries))
	for src, e := range k.entries {
		if e.doc != "" {
			docs[src] = e.doc
		}
	}
	k.snaps.Update(func(old *JWKSSnapshot, _ bool) (*JWKSSnapshot, bool) {
		if maps.Equal(docs, old.docs) {
			return old, false
		}
		return &JWKSSnapshot{Version: old.Version + 1, docs: docs}, true
	})
}
