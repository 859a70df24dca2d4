package rootcert

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// campaign runs leader election until ctx is done. Each time this replica
// loses the Lease it stops its workers and campaigns again; it never exits
// the process.
func (c *Controller) campaign(ctx context.Context) error {
	for {
		if err := c.campaignOnce(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.cfg.RetryPeriod):
		}
		c.log.Info("campaigning again for the lease")
	}
}

// campaignOnce acquires the Lease, leads until the Lease is lost or ctx is
// done, and returns once the workers have stopped. When ctx is done the
// workers stop first and the Lease is released after, so that no write of
// this replica can follow the next leader's first.
func (c *Controller) campaignOnce(ctx context.Context) error {
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()
	started, done := make(chan struct{}), make(chan struct{})
	// waitWork waits for the term's workers if the term began. A term
	// whose callback has not started by now sees its context cancelled
	// and does no work.
	waitWork := func() {
		select {
		case <-started:
			<-done
		default:
		}
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: LeaseName},
			Client:     c.cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
		},
		LeaseDuration:   c.cfg.LeaseDuration,
		RenewDeadline:   c.cfg.RenewDeadline,
		RetryPeriod:     c.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaseCtx context.Context) {
				close(started)
				defer close(done)
				workCtx, cancel := context.WithCancel(leaseCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				c.lead(workCtx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if id != c.identity {
					c.log.Info("another replica leads", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	stop := context.AfterFunc(ctx, func() {
		waitWork()
		cancelElect()
	})
	defer stop()
	le.Run(electCtx)
	waitWork()
	return nil
}
