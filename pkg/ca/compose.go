package ca

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"time"
)

// The CA's side of root rotation: the signer and trust bundle a rotation
// state asks for (compose), and a plugged-in set with a new root taken in
// by a rotation (rotateToPluggedIn). The Rotator (rotator.go) moves the
// state.

// A record of issued expiries runs watermarkTicks ticks (10 minutes by
// default) ahead of the expiries themselves, so that a replica signing
// steadily writes the store about once in that time rather than every
// tick.
const watermarkTicks = 60

// compose is the authority rotation state r asks for over base, the set
// loaded from CACertsDir or the Store: during prepare the outgoing key
// (r.Old, else base) with both roots trusted, during activate the
// incoming key (a self-signed rotation's r.New, a plugged-in one's
// cacerts set) with both, after it the incoming key alone. A plugged-in
// set wins over the self-signed one a finished rotation left.
func (c *CA) compose(base *authority, r *Rotation, now time.Time) (*authority, error) {
	sets := map[[sha256.Size]byte]*authority{}
	defer func() { c.sets = sets }()
	if !r.InProgress() {
		if r == nil || r.New == nil || base.source != sourceSelfSigned {
			return base, nil
		}
		incoming, err := c.set(sets, r.New, now)
		if err != nil {
			return nil, fmt.Errorf("root rotation: the new set: %w", err)
		}
		return incoming, nil
	}
	newRoot, err := x509.ParseCertificate(r.NewRoot)
	if err != nil {
		return nil, fmt.Errorf("root rotation: the new root: %w", err)
	}
	if r.Phase == PhasePrepare {
		outgoing := base
		if r.Old != nil {
			if outgoing, err = c.set(sets, r.Old, now); err != nil {
				return nil, fmt.Errorf("root rotation: the old set: %w", err)
			}
		}
		return outgoing.withTrust([]*x509.Certificate{newRoot}), nil
	}
	incoming := base
	if r.New != nil {
		if incoming, err = c.set(sets, r.New, now); err != nil {
			return nil, fmt.Errorf("root rotation: the new set: %w", err)
		}
	} else if !base.roots[0].Equal(newRoot) {
		return nil, fmt.Errorf("root rotation: the plugged-in set's root (%s) is not the new root the rotation activated; restore that set", base.roots[0].Subject)
	}
	oldRoot, err := x509.ParseCertificate(r.OldRoot)
	if err != nil {
		return nil, fmt.Errorf("root rotation: the old root: %w", err)
	}
	return incoming.withTrust([]*x509.Certificate{oldRoot}), nil
}

// rotateToPluggedIn starts a rotation to a, a plugged-in set whose root is
// not the one signing: its root joins the bundle and the key signing now
// keeps signing, kept in the rotation state so that every replica (and
// this one after a restart) has it until the new key activates. A set of
// another root while a rotation is under way waits for its end.
func (c *CA) rotateToPluggedIn(a *authority) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, rev, err := c.cfg.Rotations.Load(ctx)
	if err != nil {
		return err
	}
	now := c.cfg.Clock()
	if rec.InProgress() {
		if rec.New == nil && bytes.Equal(rec.NewRoot, a.roots[0].Raw) {
			return c.publish(ctx, a, rec, rev, now) // the rotation's own incoming set, re-read
		}
		return fmt.Errorf("%w (phase %s): the plugged-in set with root %s waits until it is done",
			ErrRotationInProgress, rec.Phase, a.roots[0].Subject)
	}
	cur := c.auth.Load()
	var since time.Time
	if rec != nil {
		since = rec.Watermark
	}
	r, err := Begin(rec, cur.roots[0], a.roots[0], since, now)
	if err != nil {
		return err
	}
	r.Old = cur.material
	next, err := c.compose(a, r, now)
	if err != nil {
		return err
	}
	// The outgoing key signs on as a set of its own (r.Old), so the
	// record in force is closed and its last value is where the old
	// root's trust starts.
	h := c.beginHandOver(next)
	defer h.abort()
	c.noteIssued(r, h.from)
	if err := c.save(ctx, h, r, rev); err != nil {
		return err
	}
	c.base = a
	h.finish()
	c.rot.noteStatus(rec, r, DataPlane{}, "")
	return nil
}

// set is the authority of m, parsed once while a rotation holds it, so
// that what its key issued is tracked across ticks.
func (c *CA) set(keep map[[sha256.Size]byte]*authority, m *KeyMaterial, now time.Time) (*authority, error) {
	h := sha256.New()
	for _, part := range [][]byte{m.CACert, m.CAKey, m.CertChain, m.RootCert} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	if a, ok := c.sets[key]; ok {
		keep[key] = a
		return a, nil
	}
	a, err := newAuthority(m.rawSet(), now, sourceSelfSigned)
	if err != nil {
		return nil, err
	}
	keep[key] = a
	return a, nil
}
