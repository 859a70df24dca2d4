package keyfetch

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// maxParallelFetches bounds the key sets fetched at once.
const maxParallelFetches = 4

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
// snapshots. Each wanted key set is fetched at once, then again every
// refresh interval; while it has never been fetched, every retry
// interval. A refresh that fails keeps the keys held, as a fetch of the
// CSR path does; a key set never fetched is RejectAllJWKS. Subscribers
// hear of every snapshot whose documents changed.
//
// Fetches run in Run, at most one per key set at a time and a few at
// once, with the Client's limits; a failure is logged with the issuer and
// the reason, never with what was served.
type JWKSCache struct {
	c *Client

	mu      sync.Mutex
	wanted  map[JWKSSource]bool
	entries map[JWKSSource]*jwksEntry
	snap    *JWKSSnapshot
	subs    map[chan *JWKSSnapshot]bool
	wake    chan struct{} // a new key set is wanted
}

type jwksEntry struct {
	doc       string // "" until fetched once
	attempted time.Time
	failed    bool // the last fetch
}

// JWKSCache returns a cache fetching with c. It does no I/O.
func (c *Client) JWKSCache() *JWKSCache {
	return &JWKSCache{
		c: c, wanted: map[JWKSSource]bool{}, entries: map[JWKSSource]*jwksEntry{},
		snap: &JWKSSnapshot{docs: map[JWKSSource]string{}}, subs: map[chan *JWKSSnapshot]bool{},
		wake: make(chan struct{}, 1),
	}
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
		added = added || !k.wanted[s]
	}
	removed := false
	for s := range k.entries {
		if !wanted[s] {
			delete(k.entries, s)
			removed = true
		}
	}
	k.wanted = wanted
	if removed {
		k.publishLocked()
	}
	if added {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// Current returns the key sets held.
func (k *JWKSCache) Current() *JWKSSnapshot {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.snap
}

// Subscribe returns a channel that receives snapshots whose documents
// changed (the latest only, when the reader is slow), and a cancel
// function.
func (k *JWKSCache) Subscribe() (<-chan *JWKSSnapshot, func()) {
	ch := make(chan *JWKSSnapshot, 1)
	k.mu.Lock()
	k.subs[ch] = true
	k.mu.Unlock()
	return ch, func() {
		k.mu.Lock()
		delete(k.subs, ch)
		k.mu.Unlock()
	}
}

// Run fetches what is due until ctx is done.
func (k *JWKSCache) Run(ctx context.Context) error {
	tick := time.NewTicker(k.c.cfg.RetryInterval)
	defer tick.Stop()
	for {
		k.RefreshDue(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-k.wake:
		}
	}
}

// RefreshDue fetches the wanted key sets that are due, waits for them, and
// publishes a snapshot if a document changed.
func (k *JWKSCache) RefreshDue(ctx context.Context) {
	due := k.due()
	if len(due) == 0 {
		return
	}
	type result struct {
		src JWKSSource
		doc string
		err error
	}
	results := make(chan result, len(due))
	sem := make(chan struct{}, maxParallelFetches)
	var wg sync.WaitGroup
	for _, src := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			doc, err := k.c.FetchJWKS(ctx, src)
			results <- result{src, doc, err}
		}()
	}
	wg.Wait()
	close(results)
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := false
	for r := range results {
		e := k.entries[r.src]
		if e == nil {
			continue // no longer wanted
		}
		e.failed = r.err != nil
		if r.err != nil {
			held := "no keys held: its tokens are refused"
			if e.doc != "" {
				held = "the keys fetched before are kept"
			}
			k.c.cfg.Logger.Warn("fetching a RequestAuthentication key set failed", "issuer", r.src.Issuer, "error", r.err, "effect", held)
			continue
		}
		if e.doc != r.doc {
			k.c.cfg.Logger.Info("fetched a RequestAuthentication key set", "issuer", r.src.Issuer, "source", r.src.String(), "changed", e.doc != "")
			e.doc = r.doc
			changed = true
		}
	}
	if changed {
		k.publishLocked()
	}
}

// due returns the wanted key sets to fetch now, marking them attempted.
func (k *JWKSCache) due() []JWKSSource {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.c.cfg.Clock()
	var out []JWKSSource
	for src := range k.wanted {
		e := k.entries[src]
		if e == nil {
			e = &jwksEntry{}
			k.entries[src] = e
		}
		wait := k.c.cfg.RefreshInterval
		if e.doc == "" || e.failed {
			wait = k.c.cfg.RetryInterval
		}
		if !e.attempted.IsZero() && now.Sub(e.attempted) < wait {
			continue
		}
		e.attempted = now
		out = append(out, src)
	}
	slices.SortFunc(out, func(a, b JWKSSource) int {
		if a.Issuer != b.Issuer {
			if a.Issuer < b.Issuer {
				return -1
			}
			return 1
		}
		if a.JWKSURI < b.JWKSURI {
			return -1
		}
		if a.JWKSURI > b.JWKSURI {
			return 1
		}
		return 0
	})
	return out
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
	if maps.Equal(docs, k.snap.docs) {
		return
	}
	k.snap = &JWKSSnapshot{Version: k.snap.Version + 1, docs: docs}
	for ch := range k.subs {
		select {
		case <-ch:
		default:
		}
		ch <- k.snap
	}
}
