package replicalease_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/replicalease"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestPodRuns(t *testing.T) {
	now := time.Now()
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	pod := func(phase corev1.PodPhase, deleting time.Duration, statuses ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: statuses}}
		if deleting != 0 {
			p.DeletionTimestamp = &metav1.Time{Time: now.Add(deleting)}
		}
		return p
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		runs bool
	}{
		"a running container runs":                             {pod(corev1.PodRunning, 0, running), true},
		"a pod being deleted runs until its grace period ends": {pod(corev1.PodRunning, 10*time.Second, running), true},
		"a pod past its deletion's grace period does not run":  {pod(corev1.PodRunning, -time.Second, running), false},
		"a crash-looping container does not run":               {pod(corev1.PodRunning, 0, waiting), false},
		"a pod not started yet does not run":                   {pod(corev1.PodPending, 0), false},
		"a finished pod does not run":                          {pod(corev1.PodFailed, 0, running), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := replicalease.PodRuns(tc.pod, now); got != tc.runs {
				t.Errorf("PodRuns = %v, want %v", got, tc.runs)
			}
		})
	}
}

func newRegistry(t *testing.T, client kubernetes.Interface, ns, name string, clock *catest.Clock) *replicalease.Registry {
	t.Helper()
	r, err := replicalease.New(replicalease.Config{
		Client: client, Namespace: ns, Name: name,
		Renew: time.Second, Lifetime: 5 * time.Second, Clock: clock.Now, Logger: catest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func running(t *testing.T, r *replicalease.Registry, reported ...string) []string {
	t.Helper()
	got, err := r.Running(context.Background(), reported)
	if err != nil {
		t.Fatalf("running: %v", err)
	}
	return got
}

// A replica's Lease, renewed, names it running, and is owned by its pod
// when it has one; released when the replica stops, or lapsed, it no
// longer does, but a reported replica still counts while its pod runs.
func TestReplicasThatRun(t *testing.T) {
	env := testenv.Get(t)
	client := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	clock := catest.NewClock(time.Now().Truncate(time.Second))

	env.ServiceAccountToken(t, ns, "istiod", nil, nil) // the pod's ServiceAccount
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod-a"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "istiod",
			Containers:         []corev1.Container{{Name: "discovery", Image: "istiod"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "discovery", Image: "istiod", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
	}}}
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	a := newRegistry(t, client, ns, "istiod-a", clock)
	b := newRegistry(t, client, ns, "istiod-b", clock) // no pod: istiod run outside the cluster
	// observer reads the Leases by a clock of its own, to see them lapse.
	observerClock := catest.NewClock(clock.Now())
	observer := newRegistry(t, client, ns, "istiod-c", observerClock)
	runUntilLeased(t, client, ns, a, "istiod-a")
	stopB := runUntilLeased(t, client, ns, b, "istiod-b")
	if got := running(t, observer); !slices.Equal(got, []string{"istiod-a", "istiod-b"}) {
		t.Fatalf("running %v, want both replicas", got)
	}
	lease, err := client.CoordinationV1().Leases(ns).Get(ctx, "istiod-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if owners := lease.OwnerReferences; len(owners) != 1 || owners[0].Kind != "Pod" || owners[0].UID != pod.UID {
		t.Errorf("istiod-a's Lease is owned by %+v, want its pod", owners)
	}

	// Stopped, istiod-b releases its Lease: without a pod it is gone at once.
	stopB()
	if got := running(t, observer, "istiod-a", "istiod-b"); !slices.Equal(got, []string{"istiod-a"}) {
		t.Errorf("after istiod-b stopped: running %v", got)
	}
	// istiod-a's Lease lapses (renewed no more, as when it is cut off from
	// the API server): its running pod still counts it, if it reported.
	observerClock.Advance(10 * time.Second)
	if got := running(t, observer, "istiod-a"); !slices.Equal(got, []string{"istiod-a"}) {
		t.Errorf("with its pod running, istiod-a: running %v", got)
	}
	if got := running(t, observer); len(got) != 0 {
		t.Errorf("istiod-a counted by a lapsed Lease: running %v", got)
	}
	if err := client.CoreV1().Pods(ns).Delete(ctx, "istiod-a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if got := running(t, observer, "istiod-a"); len(got) != 0 {
		t.Errorf("istiod-a's pod deleted: running %v", got)
	}
}

// runUntilLeased runs r until its Lease is there, and returns a function
// that stops it and waits for it to return.
func runUntilLeased(t *testing.T, client kubernetes.Interface, ns string, r *replicalease.Registry, name string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: run: %v", name, err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := client.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no Lease after 30s (%v)", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Lease of the replica's name that is not a replica's is left alone.
func TestAnotherLeaseOfTheNameIsLeftAlone(t *testing.T) {
	env := testenv.Get(t)
	client := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	holder := "someone-else"
	other, err := client.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod-a"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logs, log := logtest.New(t)
	r, err := replicalease.New(replicalease.Config{
		Client: client, Namespace: ns, Name: "istiod-a", Renew: 10 * time.Millisecond, Lifetime: time.Second, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for logs.Count("replica lease: cannot renew", "not an istiod replica's") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no log of the refusal after 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	got, err := client.CoordinationV1().Leases(ns).Get(context.Background(), "istiod-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != other.ResourceVersion {
		t.Errorf("the other Lease was written: %+v", got.Spec)
	}
}
