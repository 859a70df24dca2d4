package ca

import "sync"

// subscriber holds at most one undelivered bundle. A newer bundle replaces
// an undelivered one, so a slow reader skips to the latest and the CA never
// blocks on it.
type subscriber struct {
	ch        chan *Bundle
	closeOnce sync.Once
}

// offer delivers b, replacing an undelivered bundle. Callers hold pubMu, so
// offer is the only sender and the second send always has room.
func (s *subscriber) offer(b *Bundle) {
	select {
	case s.ch <- b:
		return
	default:
	}
	select {
	case <-s.ch:
	default:
	}
	s.ch <- b
}

// Subscribe returns a channel that receives the current bundle first (if a
// signer is loaded) and then every new bundle. A slow reader gets the
// latest bundle rather than each one. cancel stops delivery and closes the
// channel; it may be called more than once.
func (c *CA) Subscribe() (updates <-chan *Bundle, cancel func()) {
	s := &subscriber{ch: make(chan *Bundle, 1)}
	c.pubMu.Lock()
	c.subs[s] = struct{}{}
	if b := c.Current(); b != nil {
		s.ch <- b
	}
	c.pubMu.Unlock()
	return s.ch, func() {
		s.closeOnce.Do(func() {
			c.pubMu.Lock()
			delete(c.subs, s)
			close(s.ch)
			c.pubMu.Unlock()
		})
	}
}
