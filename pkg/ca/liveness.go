package ca

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Liveness tells which replicas run by a signal other than their reports
// in the rotation state, so that a replica that can no longer write the
// state (its permission taken away, its writes failing, the API server
// out of its reach) is told apart from one that is gone.
type Liveness interface {
	// Running returns the replicas that run now: every replica that
	// announces itself, and those of reported that are still running. An
	// error means it cannot tell.
	Running(ctx context.Context, reported []string) ([]string, error)
}

// LivenessFunc adapts a function to Liveness.
type LivenessFunc func(ctx context.Context, reported []string) ([]string, error)

// Running calls f.
func (f LivenessFunc) Running(ctx context.Context, reported []string) ([]string, error) {
	return f(ctx, reported)
}

// counted is what the reports in r say the data plane lacks at now: the
// reports made within StaleReports ticks and, with a Liveness, the last
// ones of the replicas still running, and the running replicas that never
// reported. Without a Liveness (local mode, one process) a silent
// replica is taken to be gone. While a rotation prepares, a replica that
// cannot tell which replicas run moves nothing: the error says so.
func (c *CA) counted(ctx context.Context, r *Rotation, now time.Time) (DataPlane, error) {
	since := now.Add(-StaleReports * c.cfg.RotationTick)
	if c.cfg.Liveness == nil || r.Phase != PhasePrepare {
		return r.Counted(since, nil), nil
	}
	lctx, cancel := context.WithTimeout(ctx, livenessTimeout)
	defer cancel()
	running, err := c.cfg.Liveness.Running(lctx, slices.Sorted(maps.Keys(r.Replicas)))
	if err != nil {
		return DataPlane{}, fmt.Errorf("root rotation: cannot tell which replicas run, so the rotation stays in %s: %w", r.Phase, err)
	}
	return r.Counted(since, running), nil
}

// livenessTimeout bounds one question to the Liveness.
const livenessTimeout = 10 * time.Second

// RunningReplicas returns the replicas that run while r prepares, as a
// rotation step counts them, for an operator; known is false without a
// Liveness (local mode) or outside prepare.
func (c *CA) RunningReplicas(ctx context.Context, r *Rotation) (running []string, known bool, err error) {
	if c.cfg.Liveness == nil || r == nil || r.Phase != PhasePrepare {
		return nil, false, nil
	}
	running, err = c.cfg.Liveness.Running(ctx, slices.Sorted(maps.Keys(r.Replicas)))
	if err != nil {
		return nil, false, fmt.Errorf("root rotation: which replicas run: %w", err)
	}
	return running, true, nil
}
