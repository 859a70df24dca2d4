package model

import (
	"sync"
	"sync/atomic"
)

// Publisher receives the snapshots a source builds.
type Publisher interface {
	Publish(*Snapshot)
}

// Store holds the current snapshot and announces new ones.
type Store struct {
	current atomic.Pointer[Snapshot]
	mu      sync.Mutex
	subs    map[chan *Snapshot]struct{}
}

var _ Publisher = (*Store)(nil)

// NewStore returns a store whose current snapshot is empty.
func NewStore() *Store {
	s := &Store{subs: make(map[chan *Snapshot]struct{})}
	s.current.Store(Build("", Options{}, Resources{}))
	return s
}

// Current returns the current snapshot; never nil.
func (s *Store) Current() *Snapshot { return s.current.Load() }

// Publish makes snap current unless its version is the current one, and
// announces it. It never blocks: a slow subscriber gets only the latest.
func (s *Store) Publish(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.current.Load(); old != nil && old.Version == snap.Version && snap.Version != "" {
		return
	}
	s.current.Store(snap)
	for ch := range s.subs {
		select {
		case <-ch:
		default:
		}
		ch <- snap
	}
}

// Subscribe returns a channel receiving each new snapshot (the latest only,
// when the reader is slow). cancel stops delivery and closes the channel.
func (s *Store) Subscribe() (updates <-chan *Snapshot, cancel func()) {
	ch := make(chan *Snapshot, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.subs, ch)
			close(ch)
			s.mu.Unlock()
		})
	}
}
