package ca

import (
	"context"
	"errors"
	"sync"
	"time"
)

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

// commitStep steps r at now with dp (what r's reports count), saves the
// result at rev when it differs from what was loaded, and installs the
// signer it asks for over base. When that signer keeps another issuance
// record than the one in force (the new key activating), the record in
// force is closed first and its last value noted in r, which is stepped
// again with it: the state saved then bounds every certificate the
// signer giving way signed. It returns the state saved, nil when another
// writer moved the stored one first.
func (c *CA) commitStep(ctx context.Context, base *authority, r *Rotation, dp DataPlane, changed bool, rev string, now time.Time) (saved *Rotation, waiting string, err error) {
	stepped, waiting := r.Step(now, dp, c.cfg.RotationPolicy)
	sets := c.sets
	defer func() {
		if saved == nil {
			c.sets = sets // the sets of the state in force, not of one not saved
		}
	}()
	a, err := c.compose(base, stepped, now)
	if err != nil {
		return nil, "", err
	}
	h := c.beginHandOver(a)
	defer h.abort()
	if h.closing && c.noteIssued(r, h.from) {
		changed = true
		stepped, waiting = r.Step(now, dp, c.cfg.RotationPolicy)
		if h.next, err = c.compose(base, stepped, now); err != nil {
			return nil, "", err
		}
	}
	if stepped != r || changed {
		if err := c.save(ctx, h, stepped, rev); errors.Is(err, ErrRotationConflict) {
			return nil, "", nil // another replica moved it: read it again next tick
		} else if err != nil {
			return nil, "", err
		}
	}
	h.finish()
	return stepped, waiting, nil
}

// handOverTimeout bounds a save made while a signer's record is closed:
// Signs wait for it.
const handOverTimeout = 10 * time.Second

// save saves r at rev, within handOverTimeout while h holds a record
// closed.
func (c *CA) save(ctx context.Context, h *handOver, r *Rotation, rev string) error {
	if h.closing {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, handOverTimeout)
		defer cancel()
	}
	_, err := c.cfg.Rotations.Save(ctx, r, rev)
	return err
}

// publish makes base the loaded set and installs the signer and bundle r
// (stored at rev) asks for over it, if they are not those in force. When
// the signer in force gives way to one keeping another issuance record,
// its last record is noted in a copy of r and saved at rev first.
func (c *CA) publish(ctx context.Context, base *authority, r *Rotation, rev string, now time.Time) error {
	a, err := c.compose(base, r, now)
	if err != nil {
		return err
	}
	h := c.beginHandOver(a)
	defer h.abort()
	if next := r.clone(); h.closing && c.noteIssued(next, h.from) {
		if err := c.save(ctx, h, next, rev); err != nil {
			return err
		}
	}
	c.base = base
	h.finish()
	return nil
}
