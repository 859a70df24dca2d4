package ca

import (
	"context"
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
