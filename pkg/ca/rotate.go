package ca

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A running CA moves the rotation in its RotationStore every RotationTick
// (rotation.go has the phases): it reports what its part of the data plane
// lacks, steps the shared state with a compare-and-swap, and publishes the
// signer and trust bundle the state asks for. A self-signed root rotates
// late in its life or on request; a plugged-in set whose root differs from
// the signing one rotates in when it appears in the cacerts directory.

// DataPlaneFunc reports what this replica's part of the data plane lacks
// of root: connected proxies that have not ACKed a bundle holding it, and
// namespaces whose root ConfigMap does not carry it.
type DataPlaneFunc func(ctx context.Context, root *x509.Certificate) DataPlane

// A record of issued expiries runs watermarkTicks ticks (10 minutes by
// default) ahead of the expiries themselves, so that a replica signing
// steadily writes the store about once in that time rather than every
// tick.
const watermarkTicks = 60

// StaleReports is how many ticks a replica's report counts for; after
// that the replica is taken to be gone, and its proxies to have
// reconnected elsewhere, unless a Liveness says it still runs.
const StaleReports = 5

// RotationStatus is where root rotation stands, for metrics and debug.
type RotationStatus struct {
	Phase Phase
	// Waiting says what holds the rotation back; empty when nothing does.
	Waiting string
	// Unacked are the proxies, of every replica, without the new bundle.
	Unacked []string
	// Roots are the roots of the published bundle.
	Roots []*x509.Certificate
}

// RotationStatus returns where root rotation stands.
func (c *CA) RotationStatus() RotationStatus {
	c.rotMu.Lock()
	defer c.rotMu.Unlock()
	st := c.rotStatus
	if a := c.auth.Load(); a != nil {
		st.Roots = a.trust
	}
	return st
}

// RunRotation moves the shared rotation every RotationTick until ctx is
// done. dp reports this replica's data plane. Without a RotationStore it
// returns at once.
func (c *CA) RunRotation(ctx context.Context, dp DataPlaneFunc) {
	if c.cfg.Rotations == nil {
		return
	}
	t := time.NewTicker(c.cfg.RotationTick)
	defer t.Stop()
	for {
		if c.Ready() {
			if err := c.rotateOnce(ctx, dp); err != nil && ctx.Err() == nil {
				c.rotationProblem(err.Error(), "root rotation: the shared state could not be moved; retrying", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rotateOnce reads the shared rotation, adds what this replica knows,
// steps it, saves it if it changed and publishes what it asks for.
func (c *CA) rotateOnce(ctx context.Context, dp DataPlaneFunc) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	base := c.base
	if base == nil {
		return nil
	}
	rec, rev, err := c.cfg.Rotations.Load(ctx)
	if err != nil {
		return err
	}
	if base.source != sourceSelfSigned && !rec.InProgress() {
		return nil // a plugged-in root is the operator's to change
	}
	now := c.cfg.Clock()
	next, changed, err := c.advance(ctx, rec, base, dp, now)
	if err != nil {
		return err
	}
	counted, err := c.counted(ctx, next, now)
	if err != nil {
		return err
	}
	saved, waiting, err := c.commitStep(ctx, base, next, counted, changed, rev, now)
	if err != nil || saved == nil {
		return err
	}
	c.noteStatus(rec, saved, counted, waiting)
	return nil
}

// advance is a copy of rec with what this replica knows added: the
// expiries its signer issued, a rotation begun when the self-signed root
// is due, its report of the data plane. changed reports whether it
// differs from rec.
func (c *CA) advance(ctx context.Context, rec *Rotation, base *authority, dp DataPlaneFunc, now time.Time) (next *Rotation, changed bool, err error) {
	next = rec.clone()
	changed = c.noteIssued(next, c.auth.Load())
	if !next.InProgress() && base.source == sourceSelfSigned && c.dueForRotation(now) {
		begun, err := c.begin(ctx, next, now)
		if err != nil {
			return nil, false, err
		}
		next, changed = begun, true
		c.log.Warn("root rotation: the self-signed root is in its last "+fmt.Sprint(c.cfg.RootGracePercentile)+"% of life; rotating",
			"not_after", c.auth.Load().roots[0].NotAfter)
	}
	if next.Phase == PhasePrepare {
		changed = c.report(ctx, next, dp, now) || changed
	}
	return next, changed, nil
}

// dueForRotation reports whether the signing root has less than
// RootGracePercentile of its life left.
func (c *CA) dueForRotation(now time.Time) bool {
	if c.cfg.RootGracePercentile < 0 {
		return false
	}
	root := c.auth.Load().roots[0]
	life := root.NotAfter.Sub(root.NotBefore)
	return float64(root.NotAfter.Sub(now)) < float64(life)*float64(c.cfg.RootGracePercentile)/100
}

// begin starts a rotation from the self-signed set in force (cur.New, or
// the Store's) to a new one.
func (c *CA) begin(ctx context.Context, cur *Rotation, now time.Time) (*Rotation, error) {
	var old *KeyMaterial
	if cur != nil {
		old = cur.New
	}
	if old == nil {
		m, err := c.cfg.Store.Load(ctx)
		if err != nil {
			return nil, fmt.Errorf("root rotation: the current self-signed set: %w", err)
		}
		old = m
	}
	oldRoot, err := old.root()
	if err != nil {
		return nil, fmt.Errorf("root rotation: the current self-signed set: %w", err)
	}
	m, err := newSelfSignedMaterial(&c.cfg, now)
	if err != nil {
		return nil, err
	}
	newRoot, err := m.root()
	if err != nil {
		return nil, err
	}
	var since time.Time
	if cur != nil {
		since = cur.Watermark
	}
	r, err := Begin(cur, oldRoot, newRoot, since, now)
	if err != nil {
		return nil, err
	}
	r.New = m
	if cur != nil {
		r.Old = cur.New
	}
	return r, nil
}

// report records this replica's view of the data plane in r, refreshed
// every other tick, and reports whether r changed.
func (c *CA) report(ctx context.Context, r *Rotation, dp DataPlaneFunc, now time.Time) bool {
	newRoot, err := x509.ParseCertificate(r.NewRoot)
	if err != nil {
		return false // UnmarshalRotation parsed it already
	}
	var seen DataPlane
	if dp != nil {
		seen = dp(ctx, newRoot)
	}
	prev, ok := r.Replicas[c.cfg.Replica]
	if ok && slices.Equal(prev.Unacked, seen.Unacked) && slices.Equal(prev.Missing, seen.Missing) &&
		now.Sub(prev.At) < 2*c.cfg.RotationTick {
		return false
	}
	if r.Replicas == nil {
		r.Replicas = map[string]ReplicaReport{}
	}
	r.Replicas[c.cfg.Replica] = ReplicaReport{At: now, Unacked: seen.Unacked, Missing: seen.Missing}
	return true
}

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
	c.noteStatus(rec, r, DataPlane{}, "")
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

// noteStatus logs a change of phase and keeps the status for metrics; dp
// is what the reports in after count.
func (c *CA) noteStatus(before, after *Rotation, dp DataPlane, waiting string) {
	phase := func(r *Rotation) Phase {
		if r == nil {
			return PhaseIdle
		}
		return r.Phase
	}
	if p, q := phase(before), phase(after); p != q {
		switch q {
		case PhasePrepare:
			c.log.Warn("root rotation: prepare: the new root joins the trust bundle; the old key signs until the data plane holds it",
				"new_root_not_after", mustParse(after.NewRoot).NotAfter)
		case PhaseActivate:
			c.log.Warn("root rotation: activate: the new key signs; the old root stays trusted until what it signed expires",
				"old_signed_until", after.OldSignedUntil, "forced", after.Forced)
		default:
			c.log.Warn("root rotation: done: the old root left the trust bundle")
		}
	}
	var unacked []string
	if after.Phase == PhasePrepare {
		unacked = dp.Unacked
	}
	c.rotMu.Lock()
	logWaiting := waiting != "" && (waiting != c.rotStatus.Waiting || c.cfg.Clock().Sub(c.waitLogged) >= time.Minute)
	if logWaiting {
		c.waitLogged = c.cfg.Clock()
	}
	c.rotStatus = RotationStatus{Phase: phase(after), Waiting: waiting, Unacked: unacked}
	c.rotProblem = ""
	c.rotMu.Unlock()
	if logWaiting {
		c.log.Info("root rotation: waiting", "phase", after.Phase, "for", waiting)
	}
}

// rotationProblem logs a problem once until it changes or a tick succeeds.
func (c *CA) rotationProblem(key, msg string, args ...any) {
	c.rotMu.Lock()
	repeated := key == c.rotProblem
	c.rotProblem = key
	c.rotMu.Unlock()
	if !repeated {
		c.log.Error(msg, args...)
	}
}

func mustParse(der []byte) *x509.Certificate {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return &x509.Certificate{}
	}
	return c
}

// RequestRotation begins a rotation of the self-signed root in the
// RotationStore, for the running replicas to carry out, and returns it.
// A rotation under way is returned with an error wrapping
// ErrRotationInProgress; a plugged-in CA (a set in CACertsDir) is refused.
func (c *CA) RequestRotation(ctx context.Context) (*Rotation, error) {
	if c.cfg.Rotations == nil {
		return nil, errors.New("root rotation: no rotation store configured")
	}
	if c.cfg.CACertsDir != "" {
		if _, found, err := readCACerts(c.cfg.CACertsDir); found || err != nil {
			return nil, fmt.Errorf("root rotation: the CA is plugged in from %s: put a set with the new root there, and istiod rotates to it", c.cfg.CACertsDir)
		}
	}
	// A running replica may save its own report between the load and the
	// save: the request is made again on what it saved.
	for range 5 {
		cur, rev, err := c.cfg.Rotations.Load(ctx)
		if err != nil {
			return nil, err
		}
		if cur.InProgress() {
			return cur, fmt.Errorf("%w (phase %s since %s)", ErrRotationInProgress, cur.Phase, cur.Prepared.UTC().Format(time.RFC3339))
		}
		r, err := c.begin(ctx, cur, c.cfg.Clock())
		if err != nil {
			return nil, err
		}
		if _, err := c.cfg.Rotations.Save(ctx, r, rev); !errors.Is(err, ErrRotationConflict) {
			if err != nil {
				return nil, err
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("root rotation: %w five times in a row", ErrRotationConflict)
}

// RecordIssued saves the latest expiry this process signed into the
// rotation state, for a process that signs without moving the rotation
// (mint-cert): the root it signed under stays trusted until then.
func (c *CA) RecordIssued(ctx context.Context) error {
	if c.cfg.Rotations == nil || !c.Ready() {
		return nil
	}
	for range 5 {
		rec, rev, err := c.cfg.Rotations.Load(ctx)
		if err != nil {
			return err
		}
		next := rec.clone()
		if !c.noteIssued(next, c.auth.Load()) {
			return nil
		}
		if _, err := c.cfg.Rotations.Save(ctx, next, rev); !errors.Is(err, ErrRotationConflict) {
			return err
		}
	}
	return ErrRotationConflict
}

// Rotation returns the stored rotation state, nil for none.
func (c *CA) Rotation(ctx context.Context) (*Rotation, error) {
	if c.cfg.Rotations == nil {
		return nil, nil
	}
	r, _, err := c.cfg.Rotations.Load(ctx)
	return r, err
}
