// Package replicalease tells which istiod replicas run without asking
// them to write the root rotation state: each replica keeps a
// coordination.k8s.io Lease of its own in istiod's namespace, named after
// it (its pod), and a replica whose Lease has lapsed still counts while
// its pod runs. A root rotation waits on the replicas it names, so that
// one cut off from the rotation state, still serving its proxies, is not
// taken to be gone.
package replicalease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// Labels mark the Leases of istiod replicas; Selector selects them.
var Labels = map[string]string{
	"app.kubernetes.io/part-of":   "bulwark",
	"app.kubernetes.io/component": "ca-replica",
}

// Selector is the label selector of Labels.
const Selector = "app.kubernetes.io/part-of=bulwark,app.kubernetes.io/component=ca-replica"

// Config configures a Registry.
type Config struct {
	// Client talks to the API server; required.
	Client kubernetes.Interface
	// Namespace is istiod's namespace, of its Leases and its pods; required.
	Namespace string
	// Name is this replica's name: its pod's, which names its Lease;
	// required.
	Name string
	// Renew is how often the Lease is renewed; Lifetime how long a renewal
	// counts (rounded up to a second, as a Lease holds whole seconds).
	Renew, Lifetime time.Duration
	// Clock returns the current time.
	Clock func() time.Time
	// Logger receives the problems of renewing.
	Logger *slog.Logger
}

// Registry keeps this replica's Lease and tells which replicas run.
type Registry struct {
	cfg   Config
	lease *coordinationv1.Lease // as last written; nil to read again
	// problem is the last renewal problem logged, so that it is logged
	// once until it changes.
	problem string
}

var _ ca.Liveness = (*Registry)(nil)

// New returns a registry for cfg. It does no I/O.
func New(cfg Config) (*Registry, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("replica lease: client is required")
	case cfg.Namespace == "" || cfg.Name == "":
		return nil, errors.New("replica lease: namespace and name are required")
	case cfg.Renew <= 0 || cfg.Lifetime <= cfg.Renew:
		return nil, fmt.Errorf("replica lease: lifetime %s must exceed the renewal period %s", cfg.Lifetime, cfg.Renew)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Registry{cfg: cfg}, nil
}

// Run renews the Lease every Renew until ctx is done, then releases it.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Renew)
	defer t.Stop()
	for ctx.Err() == nil {
		if err := r.renew(ctx); ctx.Err() == nil {
			r.noteProblem(err)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.release(rctx); err != nil {
		r.cfg.Logger.Warn("replica lease: could not release; it lapses on its own", "lease", r.where(), "err", err)
	}
	return nil
}

func (r *Registry) where() string { return r.cfg.Namespace + "/" + r.cfg.Name }

func (r *Registry) noteProblem(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == r.problem {
		return
	}
	r.problem = msg
	if err != nil {
		r.cfg.Logger.Error("replica lease: cannot renew; a root rotation may take this replica to be gone once its pod stops", "lease", r.where(), "err", err)
	} else {
		r.cfg.Logger.Info("replica lease: renewing", "lease", r.where())
	}
}

// renew creates the Lease or renews it with the version last written.
func (r *Registry) renew(ctx context.Context) error {
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	if r.lease == nil {
		l, err := leases.Get(ctx, r.cfg.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return r.create(ctx)
		case err != nil:
			return fmt.Errorf("get lease %s: %w", r.where(), err)
		case !ours(l):
			return fmt.Errorf("lease %s exists and is not an istiod replica's (labels %s); it is left alone", r.where(), Selector)
		}
		r.lease = l
	}
	l := r.lease.DeepCopy()
	r.stamp(&l.Spec)
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		r.lease = nil // read it again next time
		return fmt.Errorf("renew lease %s: %w", r.where(), err)
	}
	r.lease = updated
	return nil
}

// create creates the Lease, owned by this replica's pod when there is one,
// so that it goes when the pod does.
func (r *Registry) create(ctx context.Context) error {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: r.cfg.Name, Namespace: r.cfg.Namespace, Labels: maps.Clone(Labels),
	}}
	pod, err := r.cfg.Client.CoreV1().Pods(r.cfg.Namespace).Get(ctx, r.cfg.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get pod %s: %w", r.where(), err)
	}
	r.stamp(&l.Spec)
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	created, err := leases.Create(ctx, l, metav1.CreateOptions{})
	if apierrors.IsForbidden(err) && len(l.OwnerReferences) > 0 {
		// OwnerReferencesPermissionEnforcement (OpenShift enables it)
		// wants delete on Leases to set an owner, which istiod has not.
		// Without one the Lease outlives the pod, lapsed, and harmless.
		r.cfg.Logger.Warn("replica lease: created without its pod as owner; it stays after the pod is gone", "lease", r.where(), "err", err)
		l.OwnerReferences = nil
		created, err = leases.Create(ctx, l, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create lease %s: %w", r.where(), err)
	}
	r.lease = created
	return nil
}

func (r *Registry) stamp(spec *coordinationv1.LeaseSpec) {
	now := metav1.NewMicroTime(r.cfg.Clock())
	secs := int32(min(math.Ceil(r.cfg.Lifetime.Seconds()), math.MaxInt32))
	spec.HolderIdentity, spec.LeaseDurationSeconds, spec.RenewTime = &r.cfg.Name, &secs, &now
	if spec.AcquireTime == nil {
		spec.AcquireTime = &now
	}
}

// release ends the Lease's term, so that once the pod is gone too the
// replica counts as gone at once.
func (r *Registry) release(ctx context.Context) error {
	if r.lease == nil {
		return nil
	}
	l := r.lease.DeepCopy()
	l.Spec.HolderIdentity, l.Spec.RenewTime = nil, nil
	_, err := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	r.lease = nil
	return err
}

// Running returns the replicas that run: those whose Lease is renewed and
// those of reported whose pod runs. A replica whose Lease lapsed (it may
// have lost the API server altogether) counts while its pod runs.
func (r *Registry) Running(ctx context.Context, reported []string) ([]string, error) {
	list, err := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector})
	if err != nil {
		return nil, fmt.Errorf("list replica leases in %s: %w", r.cfg.Namespace, err)
	}
	now := r.cfg.Clock()
	var running []string
	for _, l := range list.Items {
		if held(&l, now) {
			running = append(running, l.Name)
		}
	}
	for _, name := range reported {
		if slices.Contains(running, name) {
			continue
		}
		pod, err := r.cfg.Client.CoreV1().Pods(r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get pod %s/%s: %w", r.cfg.Namespace, name, err)
		}
		if PodRuns(pod, now) {
			running = append(running, name)
		}
	}
	slices.Sort(running)
	return running, nil
}

func ours(l *coordinationv1.Lease) bool {
	for k, v := range Labels {
		if l.Labels[k] != v {
			return false
		}
	}
	return true
}

// held reports whether l's holder, the replica it names, renewed it
// within its duration.
func held(l *coordinationv1.Lease, now time.Time) bool {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity != l.Name || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}

// PodRuns reports whether pod may still serve proxies: it has not
// finished, a container of it runs, and it is not past the end of its
// deletion's grace period (by then its kubelet, if it answers, has stopped
// it; one that no longer answers leaves the pod listed as it was). A pod
// on a node lost before its eviction still counts, which holds a rotation
// until the pod is evicted.
func PodRuns(pod *corev1.Pod, now time.Time) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if d := pod.DeletionTimestamp; d != nil && !now.Before(d.Time) {
		return false
	}
	return slices.ContainsFunc(pod.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.State.Running != nil })
}
