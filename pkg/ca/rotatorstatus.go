package ca

import (
	"crypto/x509"
	"time"
)

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

// Status returns where root rotation stands.
func (r *Rotator) Status() RotationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	if a := r.ca.auth.Load(); a != nil {
		st.Roots = a.trust
	}
	return st
}

// noteStatus logs a change of phase and keeps the status for metrics; dp
// is what the reports in after count.
func (r *Rotator) noteStatus(before, after *Rotation, dp DataPlane, waiting string) {
	phase := func(rec *Rotation) Phase {
		if rec == nil {
			return PhaseIdle
		}
		return rec.Phase
	}
	if p, q := phase(before), phase(after); p != q {
		switch q {
		case PhasePrepare:
			r.log.Warn("root rotation: prepare: the new root joins the trust bundle; the old key signs until the data plane holds it",
				"new_root_not_after", mustParse(after.NewRoot).NotAfter)
		case PhaseActivate:
			r.log.Warn("root rotation: activate: the new key signs; the old root stays trusted until what it signed expires",
				"old_signed_until", after.OldSignedUntil, "forced", after.Forced)
		default:
			r.log.Warn("root rotation: done: the old root left the trust bundle")
		}
	}
	var unacked []string
	if after.Phase == PhasePrepare {
		unacked = dp.Unacked
	}
	r.mu.Lock()
	logWaiting := waiting != "" && (waiting != r.status.Waiting || r.cfg.Clock().Sub(r.waitLogged) >= time.Minute)
	if logWaiting {
		r.waitLogged = r.cfg.Clock()
	}
	r.status = RotationStatus{Phase: phase(after), Waiting: waiting, Unacked: unacked}
	r.problem = ""
	r.mu.Unlock()
	if logWaiting {
		r.log.Info("root rotation: waiting", "phase", after.Phase, "for", waiting)
	}
}

// noteProblem logs a problem once until it changes or a tick succeeds.
func (r *Rotator) noteProblem(key, msg string, args ...any) {
	r.mu.Lock()
	repeated := key == r.problem
	r.problem = key
	r.mu.Unlock()
	if !repeated {
		r.log.Error(msg, args...)
	}
}

func mustParse(der []byte) *x509.Certificate {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return &x509.Certificate{}
	}
	return c
}
