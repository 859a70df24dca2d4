// Package latest holds a value and hands each new one to its subscribers,
// the latest only to one that reads slowly: the pattern of a model
// snapshot, a trust bundle, a mesh configuration and fetched key sets,
// written once.
//
// Publishing never blocks on a subscriber: each holds at most one value
// not yet read, which a newer one replaces. Values are published in one
// order, and every subscriber sees them in that order (some skipped),
// ending with the latest.
package latest

import (
	"sync"
	"sync/atomic"
)

// Value is a value and its subscribers. The zero Value holds no value and
// is ready to use.
type Value[T any] struct {
	cur atomic.Pointer[T]

	// mu orders publication: storing a value and adding a subscriber
	// never interleave, so no subscriber misses the latest.
	mu   sync.Mutex
	subs map[*subscriber[T]]struct{}
}

// subscriber holds at most one value not yet read.
type subscriber[T any] struct {
	ch     chan T
	closed bool // under the Value's mu
}

// offer delivers v, replacing a value not yet read. The caller holds the
// Value's mu, so it is the only sender and the second send has room.
func (s *subscriber[T]) offer(v T) {
	select {
	case s.ch <- v:
		return
	default:
	}
	select {
	case <-s.ch:
	default:
	}
	s.ch <- v
}

// Load returns the value, and false when none was stored.
func (v *Value[T]) Load() (T, bool) {
	p := v.cur.Load()
	if p == nil {
		var zero T
		return zero, false
	}
	return *p, true
}

// Store makes x the value and hands it to every subscriber.
func (v *Value[T]) Store(x T) {
	v.Update(func(T, bool) (T, bool) { return x, true })
}

// Update calls next with the value (ok is false when there is none) and,
// when next says so, makes what it returns the value and hands it to
// every subscriber. Updates are serialized: next sees the value the
// previous update left, so it can tell whether the new one is new.
func (v *Value[T]) Update(next func(old T, ok bool) (T, bool)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.Load()
	x, store := next(old, ok)
	if !store {
		return
	}
	v.cur.Store(&x)
	for s := range v.subs {
		s.offer(x)
	}
}

// Subscribe returns a channel receiving each value stored from now on
// (the latest only, when the reader is slow) and, with replay, first the
// value held if there is one. cancel stops delivery and closes the
// channel; it may be called more than once, from any goroutine.
func (v *Value[T]) Subscribe(replay bool) (updates <-chan T, cancel func()) {
	s := &subscriber[T]{ch: make(chan T, 1)}
	v.mu.Lock()
	if v.subs == nil {
		v.subs = make(map[*subscriber[T]]struct{})
	}
	v.subs[s] = struct{}{}
	if x, ok := v.Load(); ok && replay {
		s.ch <- x
	}
	v.mu.Unlock()
	return s.ch, func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if s.closed {
			return
		}
		s.closed = true
		delete(v.subs, s)
		close(s.ch)
	}
}
