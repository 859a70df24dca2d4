package authn

import (
	"container/list"
	"sync"
	"time"
)

// reviewCache is a bounded least-recently-used cache of successful token
// reviews, each valid until its own expiry.
type reviewCache struct {
	mu      sync.Mutex
	size    int
	order   *list.List // front: most recently used; values are *cacheEntry
	entries map[[32]byte]*list.Element
}

type cacheEntry struct {
	key     [32]byte
	result  reviewResult
	expires time.Time
}

func newReviewCache(size int) *reviewCache {
	return &reviewCache{size: size, order: list.New(), entries: make(map[[32]byte]*list.Element)}
}

// get returns the entry for key if it has not expired at now.
func (c *reviewCache) get(key [32]byte, now time.Time) (reviewResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return reviewResult{}, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.entries, key)
		return reviewResult{}, false
	}
	c.order.MoveToFront(el)
	return e.result, true
}

// put stores result until expires, evicting the least recently used entry
// when the cache is full.
func (c *reviewCache) put(key [32]byte, result reviewResult, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*cacheEntry)
		e.result, e.expires = result, expires
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*cacheEntry).key)
	}
	c.entries[key] = c.order.PushFront(&cacheEntry{key: key, result: result, expires: expires})
}

// len returns the number of entries, expired ones included.
func (c *reviewCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
