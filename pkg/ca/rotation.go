package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Root rotation moves the mesh from one root to another without a moment
// in which a workload holds a certificate its peers cannot verify:
//
//  1. prepare: the new root joins the trust bundle beside the old one and
//     is distributed everywhere the bundle goes; the old key keeps
//     signing.
//  2. activate: once the data plane holds the new bundle (every connected
//     proxy ACKed a bundle with the new root, every namespace's root
//     ConfigMap carries it) and a propagation grace has passed, the new key
//     signs. The old root stays trusted.
//  3. retire: once the last certificate the old key signed has expired,
//     the old root leaves the bundle and the rotation is done.
//
// Rotation is the state of one rotation, persisted so that replicas share
// it and a restart resumes it; Step decides each move from what the data
// plane reports, so the same inputs always give the same phase.

// Phase is where a rotation stands.
type Phase string

// The phases of a rotation; PhaseIdle is none under way.
const (
	PhaseIdle     Phase = ""
	PhasePrepare  Phase = "prepare"
	PhaseActivate Phase = "activate"
)

// Defaults of RotationPolicy fields left zero.
const (
	DefaultRotationGrace   = 2 * time.Minute
	DefaultRotationTimeout = 24 * time.Hour
)

// ErrRotationInProgress is returned when a rotation is asked for while one
// is under way.
var ErrRotationInProgress = errors.New("a root rotation is already under way")

// Rotation is the persisted state of root rotation: one under way
// (prepare, activate) or, between rotations (PhaseIdle), the self-signed
// set the last one left signing and how long the signing key's
// certificates live.
type Rotation struct {
	Phase Phase `json:"phase"`
	// OldRoot and NewRoot are the roots, DER; in PhaseIdle only NewRoot,
	// the root of New.
	OldRoot []byte `json:"oldRoot,omitempty"`
	NewRoot []byte `json:"newRoot,omitempty"`
	// Old is the outgoing self-signed set when an earlier rotation made it
	// (nil: the set in istio-ca-secret); New the incoming one, which stays
	// here after the rotation, as istio-ca-secret is never rewritten.
	Old *KeyMaterial `json:"old,omitempty"`
	New *KeyMaterial `json:"new,omitempty"`
	// Prepared is when the new root joined the bundle; Activated when the
	// new key began to sign.
	Prepared  time.Time `json:"prepared,omitzero"`
	Activated time.Time `json:"activated,omitzero"`
	// OldSignedUntil is the latest expiry of a certificate the old key
	// signed: the old root is trusted until then.
	OldSignedUntil time.Time `json:"oldSignedUntil,omitzero"`
	// Watermark bounds the expiry of every certificate the signing key
	// has signed, as replicas report it; the next rotation starts its
	// OldSignedUntil from it.
	Watermark time.Time `json:"watermark,omitzero"`
	// Replicas are each replica's last report, during prepare, of what
	// its part of the data plane lacks.
	Replicas map[string]ReplicaReport `json:"replicas,omitempty"`
	// Forced records that activation went ahead past the timeout with
	// proxies that had not ACKed the new bundle.
	Forced []string `json:"forced,omitempty"`
}

// ReplicaReport is what one replica saw of the data plane at At.
type ReplicaReport struct {
	At      time.Time `json:"at"`
	Unacked []string  `json:"unacked,omitempty"`
	Missing []string  `json:"missing,omitempty"`
}

// RotationPolicy is how a rotation waits for the data plane.
type RotationPolicy struct {
	// Grace is the least time between prepare and activate, for kubelet
	// to sync ConfigMap volumes.
	Grace time.Duration
	// Timeout is how long prepare waits for proxies that do not ACK the new
	// bundle; ProceedAfterTimeout decides whether activation then goes
	// ahead (with those proxies named) or prepare stays.
	Timeout             time.Duration
	ProceedAfterTimeout bool
}

func (p RotationPolicy) withDefaults() RotationPolicy {
	setDuration(&p.Grace, DefaultRotationGrace)
	setDuration(&p.Timeout, DefaultRotationTimeout)
	return p
}

// DataPlane is what the data plane holds, as Step reads it.
type DataPlane struct {
	// Unacked names the connected proxies that have not ACKed a bundle
	// holding the new root.
	Unacked []string
	// Missing names the namespaces whose root ConfigMap lacks the new root
	// ("<cluster>/<namespace>" in a remote cluster istiod controls).
	Missing []string
	// Silent names the replicas that run but have stopped reporting: their
	// last reports are in Unacked and Missing.
	Silent []string
	// Unreported names the replicas that run but have not reported in this
	// rotation: what their proxies hold is not known.
	Unreported []string
}

// Begin starts a rotation from oldRoot to newRoot at now: the prepare
// phase. oldSignedUntil is the latest expiry of a certificate the old key
// has signed so far.
func Begin(cur *Rotation, oldRoot, newRoot *x509.Certificate, oldSignedUntil, now time.Time) (*Rotation, error) {
	if cur.InProgress() {
		return nil, fmt.Errorf("%w (phase %s since %s)", ErrRotationInProgress, cur.Phase, cur.Prepared.UTC().Format(time.RFC3339))
	}
	if oldRoot.Equal(newRoot) {
		return nil, errors.New("root rotation: the new root is the current root")
	}
	if !newRoot.IsCA || newRoot.CheckSignatureFrom(newRoot) != nil {
		return nil, errors.New("root rotation: the new root is not a self-signed CA certificate")
	}
	if !now.Before(newRoot.NotAfter) || now.Before(newRoot.NotBefore) {
		return nil, fmt.Errorf("root rotation: the new root is not valid now (%s to %s)", newRoot.NotBefore.UTC(), newRoot.NotAfter.UTC())
	}
	return &Rotation{Phase: PhasePrepare, OldRoot: oldRoot.Raw, NewRoot: newRoot.Raw, Prepared: now, OldSignedUntil: oldSignedUntil}, nil
}

// Signed records a certificate the old key signed during prepare: the old
// root must stay trusted until it expires.
func (r *Rotation) Signed(notAfter time.Time) {
	if r.Phase == PhasePrepare && notAfter.After(r.OldSignedUntil) {
		r.OldSignedUntil = notAfter
	}
}

// Step is the rotation's next state at now given what the data plane
// holds: r itself when nothing changes, nil when the rotation is done
// (the old root retired). waiting says what holds it back, for the log
// and the metrics.
func (r *Rotation) Step(now time.Time, dp DataPlane, policy RotationPolicy) (next *Rotation, waiting string) {
	policy = policy.withDefaults()
	switch r.Phase {
	case PhasePrepare:
		var held []string
		if len(dp.Missing) > 0 {
			held = append(held, fmt.Sprintf("%d namespaces without the new root (%s)", len(dp.Missing), names(dp.Missing)))
		}
		if len(dp.Unacked) > 0 {
			held = append(held, fmt.Sprintf("%d proxies without the new bundle (%s)", len(dp.Unacked), names(dp.Unacked)))
		}
		if len(dp.Unreported) > 0 {
			held = append(held, fmt.Sprintf("%d replicas running without a report (%s): can they update the rotation state?", len(dp.Unreported), names(dp.Unreported)))
		}
		if len(held) > 0 && len(dp.Silent) > 0 {
			held = append(held, fmt.Sprintf("the last reports of %d replicas running but silent (%s) kept", len(dp.Silent), names(dp.Silent)))
		}
		if since := now.Sub(r.Prepared); since < policy.Grace {
			held = append(held, fmt.Sprintf("propagation grace until %s", r.Prepared.Add(policy.Grace).UTC().Format(time.RFC3339)))
		}
		if len(held) == 0 {
			return r.activated(now, nil), ""
		}
		// Past the timeout only proxies that never ACK, and replicas that
		// never report, can hold it: a namespace's ConfigMap istiod writes
		// itself, and the grace is shorter than the timeout. Both are
		// recorded.
		if now.Sub(r.Prepared) >= policy.Timeout && policy.ProceedAfterTimeout && len(dp.Missing) == 0 && now.Sub(r.Prepared) >= policy.Grace {
			forced := slices.Clone(dp.Unacked)
			for _, id := range dp.Unreported {
				forced = append(forced, "replica "+id+" (unreported)")
			}
			return r.activated(now, forced), ""
		}
		return r, strings.Join(held, "; ")
	case PhaseActivate:
		if !now.Before(r.OldSignedUntil) {
			return &Rotation{NewRoot: r.NewRoot, New: r.New, Watermark: r.Watermark}, ""
		}
		return r, fmt.Sprintf("certificates signed by the old key valid until %s", r.OldSignedUntil.UTC().Format(time.RFC3339))
	default:
		return r, ""
	}
}

// clone is a copy of r to change without changing r; an idle rotation
// for nil.
func (r *Rotation) clone() *Rotation {
	if r == nil {
		return &Rotation{}
	}
	cp := *r
	cp.Replicas = maps.Clone(r.Replicas)
	return &cp
}

// InProgress reports whether r is a rotation under way.
func (r *Rotation) InProgress() bool { return r != nil && r.Phase != PhaseIdle }

// DataPlane is the union of the replicas' reports made since stale.
func (r *Rotation) DataPlane(since time.Time) DataPlane { return r.Counted(since, nil) }

// Counted is the union of the reports that count: those made since, and
// the last ones of the replicas in running, which run though silent (they
// may have lost the right or the means to write the state, and still
// serve their proxies). A replica neither reporting since nor running is
// gone, and its proxies have reconnected to the others. A running replica
// without a report is Unreported.
func (r *Rotation) Counted(since time.Time, running []string) DataPlane {
	var dp DataPlane
	for _, id := range slices.Sorted(maps.Keys(r.Replicas)) {
		rep := r.Replicas[id]
		if rep.At.Before(since) {
			if !slices.Contains(running, id) {
				continue
			}
			dp.Silent = append(dp.Silent, id)
		}
		dp.Unacked = append(dp.Unacked, rep.Unacked...)
		dp.Missing = append(dp.Missing, rep.Missing...)
	}
	for _, id := range running {
		if _, ok := r.Replicas[id]; !ok {
			dp.Unreported = append(dp.Unreported, id)
		}
	}
	slices.Sort(dp.Unacked)
	slices.Sort(dp.Missing)
	slices.Sort(dp.Unreported)
	dp.Unacked, dp.Missing, dp.Unreported = slices.Compact(dp.Unacked), slices.Compact(dp.Missing), slices.Compact(dp.Unreported)
	return dp
}

func (r *Rotation) activated(now time.Time, forced []string) *Rotation {
	next := *r
	next.Phase, next.Activated, next.Forced, next.Replicas = PhaseActivate, now, forced, nil
	next.Old = nil // the old key signs no more; its root stays trusted
	next.Watermark = time.Time{}
	return &next
}

// Roots are the roots the trust bundle holds in r's phase: the root of
// the key that signs, then the other.
func (r *Rotation) Roots() (signing, other []byte) {
	if r.Phase == PhaseActivate {
		return r.NewRoot, r.OldRoot
	}
	return r.OldRoot, r.NewRoot
}

// NewKeySigns reports whether the new key signs in r's phase.
func (r *Rotation) NewKeySigns() bool { return r != nil && r.Phase == PhaseActivate }

// maxRotationBytes bounds a persisted rotation: two roots, two CA sets,
// the replicas' reports and the forced proxies.
const maxRotationBytes = 256 << 10

// maxReplicaReports bounds the replicas a rotation waits for.
const maxReplicaReports = 64

// MarshalRotation encodes r for its store.
func MarshalRotation(r *Rotation) ([]byte, error) { return json.Marshal(r) }

// UnmarshalRotation decodes and checks a persisted rotation.
func UnmarshalRotation(b []byte) (*Rotation, error) {
	if len(b) > maxRotationBytes {
		return nil, fmt.Errorf("rotation state: %d bytes, limit %d", len(b), maxRotationBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Rotation
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("rotation state: %w", err)
	}
	roots := map[string][]byte{"old root": r.OldRoot, "new root": r.NewRoot}
	switch r.Phase {
	case PhasePrepare, PhaseActivate:
		if r.Prepared.IsZero() || (r.Phase == PhaseActivate && r.Activated.Before(r.Prepared)) {
			return nil, errors.New("rotation state: inconsistent times")
		}
	case PhaseIdle:
		if len(r.OldRoot) > 0 || len(r.Replicas) > 0 || r.Old != nil {
			return nil, errors.New("rotation state: idle with a rotation's fields")
		}
		delete(roots, "old root")
		if r.New == nil {
			delete(roots, "new root")
		}
	default:
		return nil, fmt.Errorf("rotation state: unknown phase %q", r.Phase)
	}
	for name, der := range roots {
		if _, err := x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("rotation state: %s: %w", name, err)
		}
	}
	if len(r.Replicas) > maxReplicaReports {
		return nil, fmt.Errorf("rotation state: %d replica reports, limit %d", len(r.Replicas), maxReplicaReports)
	}
	for name, m := range map[string]*KeyMaterial{"old set": r.Old, "new set": r.New} {
		if m == nil {
			continue
		}
		root, err := m.root()
		if err != nil {
			return nil, fmt.Errorf("rotation state: %s: %w", name, err)
		}
		if want := map[string][]byte{"old set": r.OldRoot, "new set": r.NewRoot}[name]; !bytes.Equal(root.Raw, want) {
			return nil, fmt.Errorf("rotation state: the %s's root is not the %s root", name, strings.Fields(name)[0])
		}
	}
	return &r, nil
}

// names lists at most a few names, for a log line.
func names(list []string) string {
	const most = 5
	s := slices.Sorted(slices.Values(list))
	if len(s) > most {
		return fmt.Sprintf("%s and %d more", strings.Join(s[:most], ", "), len(s)-most)
	}
	return strings.Join(s, ", ")
}
