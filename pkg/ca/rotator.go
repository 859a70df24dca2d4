package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// A running replica moves the rotation in its RotationStore every
// RotationTick (rotation.go has the phases): it reports what its part of
// the data plane lacks, steps the shared state with a compare-and-swap,
// and has the CA install the signer and trust bundle the state asks for.
// A self-signed root rotates late in its life or on request; a plugged-in
// set whose root differs from the signing one rotates in when it appears
// in the cacerts directory.
//
// The Rotator drives this, apart from the CA that signs: the CA installs
// what a rotation state asks for (compose, commitStep, publish) and keeps
// the record of what each key issued; the Rotator decides when and how the
// state moves, and says where it stands.

// DataPlaneFunc reports what this replica's part of the data plane lacks
// of root: connected proxies that have not ACKed a bundle holding it, and
// namespaces whose root ConfigMap does not carry it.
type DataPlaneFunc func(ctx context.Context, root *x509.Certificate) DataPlane

// StaleReports is how many ticks a replica's report counts for; after
// that the replica is taken to be gone, and its proxies to have
// reconnected elsewhere, unless a Liveness says it still runs.
const StaleReports = 5

// Rotator drives the root rotation of one CA. Get it with CA.Rotator.
type Rotator struct {
	ca  *CA
	cfg *Config // the CA's
	log *slog.Logger

	mu         sync.Mutex
	status     RotationStatus
	problem    string
	waitLogged time.Time
}

func newRotator(c *CA) *Rotator { return &Rotator{ca: c, cfg: &c.cfg, log: c.log} }

// Rotator is the CA's rotation driver.
func (c *CA) Rotator() *Rotator { return c.rot }

// Run moves the shared rotation every RotationTick until ctx is done. dp
// reports this replica's data plane. Without a RotationStore it returns
// at once.
func (r *Rotator) Run(ctx context.Context, dp DataPlaneFunc) {
	if r.cfg.Rotations == nil {
		return
	}
	t := time.NewTicker(r.cfg.RotationTick)
	defer t.Stop()
	for {
		if r.ca.Ready() {
			if err := r.tick(ctx, dp); err != nil && ctx.Err() == nil {
				r.noteProblem(err.Error(), "root rotation: the shared state could not be moved; retrying", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick reads the shared rotation, adds what this replica knows, steps it,
// saves it if it changed and has the CA install what it asks for.
func (r *Rotator) tick(ctx context.Context, dp DataPlaneFunc) error {
	c := r.ca
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	base := c.base
	if base == nil {
		return nil
	}
	rec, rev, err := r.cfg.Rotations.Load(ctx)
	if err != nil {
		return err
	}
	if base.source != sourceSelfSigned && !rec.InProgress() {
		return nil // a plugged-in root is the operator's to change
	}
	now := r.cfg.Clock()
	next, changed, err := r.advance(ctx, rec, base, dp, now)
	if err != nil {
		return err
	}
	counted, err := r.counted(ctx, next, now)
	if err != nil {
		return err
	}
	saved, waiting, err := c.commitStep(ctx, base, next, counted, changed, rev, now)
	if err != nil || saved == nil {
		return err
	}
	r.noteStatus(rec, saved, counted, waiting)
	return nil
}

// advance is a copy of rec with what this replica knows added: the
// expiries its signer issued, a rotation begun when the self-signed root
// is due, its report of the data plane. changed reports whether it
// differs from rec.
func (r *Rotator) advance(ctx context.Context, rec *Rotation, base *authority, dp DataPlaneFunc, now time.Time) (next *Rotation, changed bool, err error) {
	next = rec.clone()
	changed = r.ca.noteIssued(next, r.ca.auth.Load())
	if !next.InProgress() && base.source == sourceSelfSigned && r.dueForRotation(now) {
		begun, err := r.begin(ctx, next, now)
		if err != nil {
			return nil, false, err
		}
		next, changed = begun, true
		r.log.Warn("root rotation: the self-signed root is in its last "+fmt.Sprint(r.cfg.RootGracePercentile)+"% of life; rotating",
			"not_after", r.ca.auth.Load().roots[0].NotAfter)
	}
	if next.Phase == PhasePrepare {
		changed = r.report(ctx, next, dp, now) || changed
	}
	return next, changed, nil
}

// dueForRotation reports whether the signing root has less than
// RootGracePercentile of its life left.
func (r *Rotator) dueForRotation(now time.Time) bool {
	if r.cfg.RootGracePercentile < 0 {
		return false
	}
	root := r.ca.auth.Load().roots[0]
	life := root.NotAfter.Sub(root.NotBefore)
	return float64(root.NotAfter.Sub(now)) < float64(life)*float64(r.cfg.RootGracePercentile)/100
}

// begin starts a rotation from the self-signed set in force (cur.New, or
// the Store's) to a new one.
func (r *Rotator) begin(ctx context.Context, cur *Rotation, now time.Time) (*Rotation, error) {
	var old *KeyMaterial
	if cur != nil {
		old = cur.New
	}
	if old == nil {
		m, err := r.cfg.Store.Load(ctx)
		if err != nil {
			return nil, fmt.Errorf("root rotation: the current self-signed set: %w", err)
		}
		old = m
	}
	oldRoot, err := old.root()
	if err != nil {
		return nil, fmt.Errorf("root rotation: the current self-signed set: %w", err)
	}
	m, err := newSelfSignedMaterial(r.cfg, now)
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
	next, err := Begin(cur, oldRoot, newRoot, since, now)
	if err != nil {
		return nil, err
	}
	next.New = m
	if cur != nil {
		next.Old = cur.New
	}
	return next, nil
}

// report records this replica's view of the data plane in rec, refreshed
// every other tick, and reports whether rec changed.
func (r *Rotator) report(ctx context.Context, rec *Rotation, dp DataPlaneFunc, now time.Time) bool {
	newRoot, err := x509.ParseCertificate(rec.NewRoot)
	if err != nil {
		return false // UnmarshalRotation parsed it already
	}
	var seen DataPlane
	if dp != nil {
		seen = dp(ctx, newRoot)
	}
	prev, ok := rec.Replicas[r.cfg.Replica]
	if ok && slices.Equal(prev.Unacked, seen.Unacked) && slices.Equal(prev.Missing, seen.Missing) &&
		now.Sub(prev.At) < 2*r.cfg.RotationTick {
		return false
	}
	if rec.Replicas == nil {
		rec.Replicas = map[string]ReplicaReport{}
	}
	rec.Replicas[r.cfg.Replica] = ReplicaReport{At: now, Unacked: seen.Unacked, Missing: seen.Missing}
	return true
}

// counted is what the reports in rec say the data plane lacks at now: the
// reports made within StaleReports ticks and, with a Liveness, the last
// ones of the replicas still running, and the running replicas that never
// reported. Without a Liveness (local mode, one process) a silent
// replica is taken to be gone. While a rotation prepares, a replica that
// cannot tell which replicas run moves nothing: the error says so.
func (r *Rotator) counted(ctx context.Context, rec *Rotation, now time.Time) (DataPlane, error) {
	since := now.Add(-StaleReports * r.cfg.RotationTick)
	if r.cfg.Liveness == nil || rec.Phase != PhasePrepare {
		return rec.Counted(since, nil), nil
	}
	lctx, cancel := context.WithTimeout(ctx, livenessTimeout)
	defer cancel()
	running, err := r.cfg.Liveness.Running(lctx, slices.Sorted(maps.Keys(rec.Replicas)))
	if err != nil {
		return DataPlane{}, fmt.Errorf("root rotation: cannot tell which replicas run, so the rotation stays in %s: %w", rec.Phase, err)
	}
	return rec.Counted(since, running), nil
}

// livenessTimeout bounds one question to the Liveness.
const livenessTimeout = 10 * time.Second

// RunningReplicas returns the replicas that run while rec prepares, as a
// rotation step counts them, for an operator; known is false without a
// Liveness (local mode) or outside prepare.
func (r *Rotator) RunningReplicas(ctx context.Context, rec *Rotation) (running []string, known bool, err error) {
	if r.cfg.Liveness == nil || rec == nil || rec.Phase != PhasePrepare {
		return nil, false, nil
	}
	running, err = r.cfg.Liveness.Running(ctx, slices.Sorted(maps.Keys(rec.Replicas)))
	if err != nil {
		return nil, false, fmt.Errorf("root rotation: which replicas run: %w", err)
	}
	return running, true, nil
}

// Request begins a rotation of the self-signed root in the RotationStore,
// for the running replicas to carry out, and returns it. A rotation under
// way is returned with an error wrapping ErrRotationInProgress; a
// plugged-in CA (a set in CACertsDir) is refused.
func (r *Rotator) Request(ctx context.Context) (*Rotation, error) {
	if r.cfg.Rotations == nil {
		return nil, errors.New("root rotation: no rotation store configured")
	}
	if r.cfg.CACertsDir != "" {
		if _, found, err := readCACerts(r.cfg.CACertsDir); found || err != nil {
			return nil, fmt.Errorf("root rotation: the CA is plugged in from %s: put a set with the new root there, and istiod rotates to it", r.cfg.CACertsDir)
		}
	}
	// A running replica may save its own report between the load and the
	// save: the request is made again on what it saved.
	for range 5 {
		cur, rev, err := r.cfg.Rotations.Load(ctx)
		if err != nil {
			return nil, err
		}
		if cur.InProgress() {
			return cur, fmt.Errorf("%w (phase %s since %s)", ErrRotationInProgress, cur.Phase, cur.Prepared.UTC().Format(time.RFC3339))
		}
		next, err := r.begin(ctx, cur, r.cfg.Clock())
		if err != nil {
			return nil, err
		}
		if _, err := r.cfg.Rotations.Save(ctx, next, rev); !errors.Is(err, ErrRotationConflict) {
			if err != nil {
				return nil, err
			}
			return next, nil
		}
	}
	return nil, fmt.Errorf("root rotation: %w five times in a row", ErrRotationConflict)
}

// RecordIssued saves the latest expiry this process signed into the
// rotation state, for a process that signs without moving the rotation
// (mint-cert): the root it signed under stays trusted until then.
func (r *Rotator) RecordIssued(ctx context.Context) error {
	if r.cfg.Rotations == nil || !r.ca.Ready() {
		return nil
	}
	for range 5 {
		rec, rev, err := r.cfg.Rotations.Load(ctx)
		if err != nil {
			return err
		}
		next := rec.clone()
		if !r.ca.noteIssued(next, r.ca.auth.Load()) {
			return nil
		}
		if _, err := r.cfg.Rotations.Save(ctx, next, rev); !errors.Is(err, ErrRotationConflict) {
			return err
		}
	}
	return ErrRotationConflict
}

// State returns the stored rotation state, nil for none.
func (r *Rotator) State(ctx context.Context) (*Rotation, error) {
	if r.cfg.Rotations == nil {
		return nil, nil
	}
	rec, _, err := r.cfg.Rotations.Load(ctx)
	return rec, err
}
