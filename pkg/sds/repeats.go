package sds

import (
	"sync"
	"time"
)

// Refusals of the same name to the same proxy identity repeat on every
// regeneration (any Secret change in the cluster regenerates every
// gateway's secrets), so only the first within refusalLogWindow is logged
// at warning level; the rest are logged at debug level and all are counted.
const (
	refusalLogWindow  = 5 * time.Minute
	refusalLogEntries = 10000
)

// repeats remembers recently seen keys, at most max of them.
type repeats struct {
	mu     sync.Mutex
	seen   map[repeatKey]time.Time
	window time.Duration
	max    int
	now    func() time.Time
}

type repeatKey struct{ cluster, namespace, serviceAccount, name, reason string }

func newRepeats(window time.Duration, max int, now func() time.Time) *repeats {
	return &repeats{seen: make(map[repeatKey]time.Time), window: window, max: max, now: now}
}

// first reports whether k was not seen within the window, and records it.
func (r *repeats) first(k repeatKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if at, ok := r.seen[k]; ok && now.Sub(at) < r.window {
		return false
	}
	if len(r.seen) >= r.max {
		for old, at := range r.seen {
			if now.Sub(at) >= r.window {
				delete(r.seen, old)
			}
		}
		if len(r.seen) >= r.max {
			clear(r.seen)
		}
	}
	r.seen[k] = now
	return true
}
