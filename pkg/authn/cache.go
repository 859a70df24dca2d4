package authn

import (
	"container/list"
	"sync"
	"time"
)

// expiringCache is a bounded least-recently-used cache keyed by a hash,
// each entry valid until its own expiry. It holds successful token reviews,
// verified OIDC tokens and verified client-certificate chains.
type expiringCache[V any] struct {
	mu      sync.Mutex
	size    int
	order   *list.List // front: most recently used; values are *cacheEntry
	entries map[[32]byte]*list.Element
}

type cacheEntry[V any] struct {
	key     [32]byte
	result  V
	expires time.Time
}

func newExpiringCache[V any](size int) *expiringCache[V] {
	return &expiringCache[V]{size: size, order: list.New(), entries: make(map[[32]byte]*list.Element)}
}

// get returns the entry for key if it has not expired at now.
func (c *expiringCache[V]) get(key [32]byte, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.entries[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*cacheEntry[V])
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.entries, key)
		return zero, false
	}
	c.order.MoveToFront(el)
	return e.result, true
}

// put stores result until expires, evicting the least recently used entry
// when the cache is full.
func (c *expiringCache[V]) put(key [32]byte, result V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*cacheEntry[V])
		e.result, e.expires = result, expires
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*cacheEntry[V]).key)
	}
	c.entries[key] = c.order.PushFront(&cacheEntry[V]{key: key, result: result, expires: expires})
}

// clear removes every entry.
func (c *expiringCache[V]) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.entries)
}

// len returns the number of entries, expired ones included.
func (c *expiringCache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
