package ca

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
)

// Run loads a signer (if none is loaded yet) and then watches CACertsDir
// until ctx is done, replacing the signer whenever a valid new set appears.
// It returns nil when ctx is cancelled.
func (c *CA) Run(ctx context.Context) error {
	if err := c.Load(ctx); err != nil {
		return fmt.Errorf("run ca: %w", err)
	}
	if c.cfg.CACertsDir == "" {
		<-ctx.Done()
		return nil
	}
	c.watch(ctx)
	return nil
}

// watch re-reads CACertsDir after each burst of file events settles, and
// every ResyncInterval in case events were missed.
func (c *CA) watch(ctx context.Context) {
	dirwatch.Run(ctx, c.cfg.CACertsDir, c.cfg.ReloadDebounce, c.cfg.ResyncInterval, c.log, c.reload)
}

// reload re-reads CACertsDir and installs a valid, changed set. Problems
// are logged, and the current signer keeps serving.
func (c *CA) reload() {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	err := c.reloadLocked()
	if c.onReloadDone != nil {
		c.onReloadDone(err)
	}
}

func (c *CA) reloadLocked() error {
	cur := c.auth.Load()
	a, found, err := loadPluggedIn(c.cfg.CACertsDir, c.cfg.Clock())
	switch {
	case err != nil:
		c.problem(err.Error(), slog.LevelError, "rejected the plugged-in CA set; the current signer keeps serving",
			"dir", c.cfg.CACertsDir, "err", err)
		return err
	case !found:
		if cur != nil && cur.source == sourcePluggedIn {
			c.problem("removed", slog.LevelWarn, "the plugged-in CA files are gone; the current signer keeps serving",
				"dir", c.cfg.CACertsDir)
		}
		return nil
	}
	if cur != nil && c.base != nil && c.base.fingerprint == a.fingerprint {
		c.lastProblem = ""
		return nil
	}
	if c.cfg.Rotations != nil && cur != nil && !a.roots[0].Equal(cur.roots[0]) {
		// A new root: rotate to it rather than swap, so that no workload
		// holds a certificate its peers cannot verify yet.
		if err := c.rotateToPluggedIn(a); err != nil {
			c.problem(err.Error(), slog.LevelError, "the plugged-in CA set has a new root that cannot be rotated to now; the current signer keeps serving",
				"dir", c.cfg.CACertsDir, "err", err)
			return err
		}
		c.lastProblem = ""
		return nil
	}
	if c.cfg.Rotations == nil {
		c.lastProblem = ""
		c.base = a
		c.install(a)
		return nil
	}
	// The same root: an intermediate or key change needs no overlap, but
	// a rotation under way still shapes what is published, and what the
	// signer giving way issued is recorded.
	if err := c.publishSameRoot(a); err != nil {
		c.problem(err.Error(), slog.LevelError, "the plugged-in CA set could not be installed; the current signer keeps serving",
			"dir", c.cfg.CACertsDir, "err", err)
		return err
	}
	c.lastProblem = ""
	return nil
}

// publishSameRoot installs a, a set of the root in force, as the rotation
// state asks.
func (c *CA) publishSameRoot(a *authority) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, rev, err := c.cfg.Rotations.Load(ctx)
	if err != nil {
		return err
	}
	return c.publish(ctx, a, rec, rev, c.cfg.Clock())
}

// problem logs a reload problem once, until a different problem or a
// successful reload, so the periodic resync does not repeat it.
func (c *CA) problem(key string, level slog.Level, msg string, args ...any) {
	if key == c.lastProblem {
		return
	}
	c.lastProblem = key
	c.log.Log(context.Background(), level, msg, args...)
}
