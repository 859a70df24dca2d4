package ca

import (
	"bytes"
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

// noteIssued raises, in r, the recorded expiry of what a's key has issued
// (a nil a issued nothing), and reports whether it did.
func (c *CA) noteIssued(r *Rotation, a *authority) bool {
	if a == nil {
		return false
	}
	hw := a.issued.get()
	target := &r.Watermark
	if r.InProgress() && bytes.Equal(a.roots[0].Raw, r.OldRoot) {
		target = &r.OldSignedUntil
	}
	if !hw.After(*target) {
		return false
	}
	*target = hw
	if target == &r.Watermark {
		*target = hw.Add(watermarkTicks * c.cfg.RotationTick)
	}
	return true
}
