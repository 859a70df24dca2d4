package ca

import (
	"sync"
	"sync/atomic"
	"time"
)

// A signing key's issuance record bounds the expiry of every workload
// certificate it signed; a root rotation keeps the key's root trusted until
// then (rotation.go). A record must never miss a certificate, so:
//
//   - Sign raises the record to a certificate's expiry before signing it,
//     and only then checks that the record is open (issuance.admit).
//   - When another signer takes the place of the one in force with another
//     record (a new key activating, a new set of the same key or root
//     loaded), the record in force is closed first and only then read for
//     the last time and saved with the change (CA.beginHandOver).
//
// Both steps are sequentially consistent atomics, so either Sign raised
// the record before the last read, which then holds its expiry, or Sign
// sees the record closed: it waits until the change is settled and signs
// with the signer then in force. A Sign that has passed the check while
// the record was open had raised it already, whenever it finishes signing.

// issuance is a signing key's record, shared by the copies of one
// authority (withTrust).
type issuance struct {
	until  atomic.Int64             // UnixNano of the latest expiry; 0 for none
	closed atomic.Pointer[handOver] // the change that closed the record; nil while open
}

// raise records a certificate valid until t.
func (s *issuance) raise(t time.Time) {
	n := t.UnixNano()
	for {
		cur := s.until.Load()
		if n <= cur || s.until.CompareAndSwap(cur, n) {
			return
		}
	}
}

// get is the latest expiry recorded, zero if none.
func (s *issuance) get() time.Time {
	if n := s.until.Load(); n != 0 {
		return time.Unix(0, n).UTC()
	}
	return time.Time{}
}

// admit records, when record is set, a certificate valid until notAfter
// that is about to be signed, and returns nil if the key may sign it, or
// a channel closed once the change that closed the record is settled.
func (s *issuance) admit(notAfter time.Time, record bool) <-chan struct{} {
	if record {
		s.raise(notAfter)
	}
	if h := s.closed.Load(); h != nil {
		return h.settled
	}
	return nil
}

// reopen opens the record again, for its key to go on signing.
func (s *issuance) reopen() {
	if h := s.closed.Swap(nil); h != nil {
		h.settle()
	}
}

// handOver is a change of signer under way: from, the signer in force,
// gives way to next. When they keep different records, from's is closed
// until the change is settled: installed (finish), or given up (abort),
// which opens it again.
type handOver struct {
	c        *CA
	from     *authority // nil before the first signer
	next     *authority
	closing  bool // from's record is closed for this change
	settled  chan struct{}
	once     sync.Once
	finished bool
}

// beginHandOver starts replacing the signer in force with next, closing
// the record in force if next keeps another. The record read after this,
// from h.from.issued, is final when h.closing. Callers hold loadMu and
// finish or abort the change before releasing it.
func (c *CA) beginHandOver(next *authority) *handOver {
	h := &handOver{c: c, from: c.auth.Load(), next: next, settled: make(chan struct{})}
	if h.from != nil && h.from.issued != next.issued {
		h.closing = true
		h.from.issued.closed.Store(h)
	}
	return h
}

// finish installs h.next, unless the signer in force already publishes
// the same, and settles the change: a Sign waiting on the closed record
// signs with h.next. The closed record stays closed.
func (h *handOver) finish() {
	if cur := h.c.auth.Load(); cur == nil || cur.fingerprint != h.next.fingerprint || cur.issued != h.next.issued {
		h.c.install(h.next)
	}
	h.finished = true
	h.settle()
}

// abort gives the change up, if not finished: the record in force opens
// again. It may be deferred.
func (h *handOver) abort() {
	if h.finished {
		return
	}
	if h.closing {
		h.from.issued.closed.CompareAndSwap(h, nil)
	}
	h.settle()
}

func (h *handOver) settle() { h.once.Do(func() { close(h.settled) }) }
