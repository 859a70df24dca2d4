package model

import "github.com/bulwark-mesh/bulwark/internal/latest"

// Publisher receives the snapshots a source builds.
type Publisher interface {
	Publish(*Snapshot)
}

// Store holds the current snapshot and announces new ones.
type Store struct {
	v latest.Value[*Snapshot]
}

var _ Publisher = (*Store)(nil)

// NewStore returns a store whose current snapshot is empty.
func NewStore() *Store {
	s := &Store{}
	s.v.Store(Build("", Options{}, Resources{}))
	return s
}

// Current returns the current snapshot; never nil.
func (s *Store) Current() *Snapshot {
	snap, _ := s.v.Load()
	return snap
}

// Publish makes snap current unless its version is the current one, and
// announces it. It never blocks: a slow subscriber gets only the latest.
func (s *Store) Publish(snap *Snapshot) {
	s.v.Update(func(old *Snapshot, _ bool) (*Snapshot, bool) {
		return snap, old == nil || old.Version != snap.Version || snap.Version == ""
	})
}

// Subscribe returns a channel receiving each new snapshot (the latest only,
// when the reader is slow). cancel stops delivery and closes the channel.
func (s *Store) Subscribe() (updates <-chan *Snapshot, cancel func()) {
	return s.v.Subscribe(false)
}
