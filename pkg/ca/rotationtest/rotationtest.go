// Package rotationtest checks a ca.RotationStore against the contract every
// store keeps.
package rotationtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// StoreContract runs a rotation through s as replicas would: nothing
// stored, a rotation begun, moved to activate, done; and a writer holding
// an old revision refused at every step.
func StoreContract(t *testing.T, s ca.RotationStore) {
	t.Helper()
	ctx := context.Background()
	r, rev, err := s.Load(ctx)
	if err != nil || r != nil || rev != "" {
		t.Fatalf("empty store: %v %q %v", r, rev, err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	begun, err := ca.Begin(nil, catest.NewRoot(t).Cert, catest.NewRoot(t).Cert, now.Add(time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	rev1, err := s.Save(ctx, begun, "")
	if err != nil || rev1 == "" {
		t.Fatalf("save the begun rotation: %q %v", rev1, err)
	}
	// A second replica beginning a rotation at the same time loses.
	if _, err := s.Save(ctx, begun, ""); !errors.Is(err, ca.ErrRotationConflict) {
		t.Fatalf("a second create: %v, want a conflict", err)
	}
	got, rev, err := s.Load(ctx)
	if err != nil || rev != rev1 || got.Phase != ca.PhasePrepare || !got.Prepared.Equal(begun.Prepared) {
		t.Fatalf("read back: %+v %q %v", got, rev, err)
	}
	active, _ := got.Step(now.Add(time.Hour), ca.DataPlane{}, ca.RotationPolicy{Grace: time.Minute})
	rev2, err := s.Save(ctx, active, rev1)
	if err != nil || rev2 == rev1 {
		t.Fatalf("save activate: %q %v", rev2, err)
	}
	// A replica still at the prepare revision cannot move it again.
	if _, err := s.Save(ctx, got, rev1); !errors.Is(err, ca.ErrRotationConflict) {
		t.Fatalf("a stale update: %v, want a conflict", err)
	}
	if _, err := s.Save(ctx, nil, rev1); !errors.Is(err, ca.ErrRotationConflict) {
		t.Fatalf("a stale delete: %v, want a conflict", err)
	}
	if got, _, _ := s.Load(ctx); got == nil || got.Phase != ca.PhaseActivate {
		t.Fatalf("after the stale writes: %+v", got)
	}
	if _, err := s.Save(ctx, nil, rev2); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if r, rev, err := s.Load(ctx); err != nil || r != nil || rev != "" {
		t.Fatalf("after the rotation: %v %q %v", r, rev, err)
	}
}
