package rootcert

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
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
	lock := &writeTrackingLock{log: c.log, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: LeaseName},
		Client:     c.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
	}}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
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
				go c.stopUnrenewed(workCtx, cancel, lock)
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

// stopUnrenewed ends the term (cancel) once the Lease has not been written
// for RenewDeadline. client-go ends the term itself only after it has also
// tried to release the Lease, which can take another RenewDeadline while
// the API server does not answer: meanwhile the Lease expires for the
// other replicas (LeaseDuration), and one of them would write ConfigMaps
// alongside this one. Stopping here keeps one writer at a time, since
// RenewDeadline is shorter than LeaseDuration.
func (c *Controller) stopUnrenewed(ctx context.Context, cancel context.CancelFunc, lock *writeTrackingLock) {
	tick := time.NewTicker(c.cfg.RetryPeriod / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if since := time.Since(lock.lastWrite()); since > c.cfg.RenewDeadline {
			c.log.Warn("lease not renewed within the renew deadline; stopping writes before it expires for the other replicas",
				"since_renewal", since.Round(time.Millisecond), "renew_deadline", c.cfg.RenewDeadline)
			cancel()
			return
		}
	}
}

// writeTrackingLock is the Lease lock, remembering when this replica last
// wrote the Lease successfully: acquired or renewed it.
type writeTrackingLock struct {
	resourcelock.Interface
	log     *slog.Logger
	mu      sync.Mutex
	written time.Time
}

// LogLeaseRead is the debug line of each read of the Lease, with its
// holder: a replica that does not lead reads it at every attempt to
// acquire it, so tests can wait for an attempt to have ended.
const LogLeaseRead = "lease read"

func (l *writeTrackingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	holder := ""
	if r != nil {
		holder = r.HolderIdentity
	}
	l.log.Debug(LogLeaseRead, "holder", holder, "ok", err == nil)
	return r, raw, err
}

func (l *writeTrackingLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	began := time.Now()
	err := l.Interface.Create(ctx, r)
	l.record(began, err)
	return err
}

func (l *writeTrackingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	began := time.Now()
	err := l.Interface.Update(ctx, r)
	l.record(began, err)
	return err
}

// record notes a successful write by when it was sent: the API server
// stored it later, and the other replicas count the Lease's duration from
// when they saw it, later still, so the term never outlasts the Lease.
func (l *writeTrackingLock) record(began time.Time, err error) {
	if err != nil {
		return
	}
	l.mu.Lock()
	l.written = began
	l.mu.Unlock()
}

func (l *writeTrackingLock) lastWrite() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}
