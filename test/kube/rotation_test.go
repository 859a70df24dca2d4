package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// A replica that can no longer write the rotation state (here its
// permission to update istio-ca-rotation is taken away) still serves its
// proxies, and the other replica keeps the rotation in prepare for them:
// while it has never reported, and while its last report names a proxy
// without the new root. Once it stops, the rotation moves on.
func TestRotationWaitsForAReplicaCutOffFromTheState(t *testing.T) {
	t.Parallel()
	// A cluster of its own: istiods of other tests writing
	// istio-ca-root-cert in its namespaces would hold the rotation back.
	env, ns, _ := privateCluster(t)
	rbac := newReplicaRBAC(t, env.Client(t), ns, "istiod-b")
	token := env.ServiceAccountToken(t, ns, "istiod-b", nil, nil)
	m := newRotationPair(t, env, ns, env.KubeconfigForToken(t, token))
	b, proxyName, state, holds := m.b, m.proxy, m.state, m.holds

	// Cut off before the rotation begins: istiod-b never reports.
	rbac.cutOff(t)
	requestRotation(t, env, ns)
	holds("running without a report (istiod-b)")
	if rep, ok := state().Replicas["istiod-b"]; ok {
		t.Fatalf("istiod-b, cut off, reported: %+v", rep)
	}
	if got := runningReplicas(t, env, ns); !slices.Contains(got, "istiod-b") {
		t.Errorf("istiod ca status: running replicas %v, want istiod-b among them", got)
	}
	waitFor(t, "istiod-b refused a write of the rotation state", 30*time.Second, func() bool {
		return strings.Contains(b.logs.String(), "root rotation: the shared state could not be moved") && strings.Contains(b.logs.String(), "forbidden")
	})

	// Allowed again, istiod-b reports its proxy; then cut off again, it
	// falls silent with that report standing.
	rbac.restore(t)
	waitFor(t, "istiod-b's report naming "+proxyName, 30*time.Second, func() bool {
		r := state()
		return r.Phase == ca.PhasePrepare && slices.Contains(r.Replicas["istiod-b"].Unacked, proxyName)
	})
	rbac.cutOff(t)
	holds("running but silent (istiod-b)")
	if r := state(); !slices.Contains(r.Replicas["istiod-b"].Unacked, proxyName) {
		t.Fatalf("istiod-b's report lost %s: %+v", proxyName, r.Replicas)
	}
	if got := runningReplicas(t, env, ns); !slices.Equal(got, []string{"istiod-a", "istiod-b"}) {
		t.Errorf("istiod ca status: running replicas %v, want istiod-a and istiod-b", got)
	}

	// istiod-b stops (its proxies would reconnect to istiod-a): gone, it
	// holds nothing.
	b.stop()
	waitFor(t, "activation once istiod-b is gone", 30*time.Second, func() bool { return state().Phase == ca.PhaseActivate })
}

// A replica cut off from the API server altogether (a network partition)
// can renew no Lease either, so its Lease lapses; it still serves its
// proxies, and while its pod runs the rotation stays in prepare for them.
// Once the pod is gone, the rotation moves on.
func TestRotationWaitsForAPartitionedReplicaWhilePodRuns(t *testing.T) {
	t.Parallel()
	env, ns, apiHost := privateCluster(t)
	ctx := context.Background()
	client := env.Client(t)
	// istiod-b's pod, as kubelet would report it: running.
	env.ServiceAccountToken(t, ns, "istiod", nil, nil)
	pod := createPod(t, client, ns, "istiod-b", "istiod", "10.0.0.2", nil)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "app", Image: "example.invalid/app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
	}}
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lnk := newLink(t, apiHost)
	m := newRotationPair(t, env, ns, kubeconfigVia(t, istiodKubeconfig(t, env, ns), env.URL, lnk.URL()))

	requestRotation(t, env, ns)
	waitFor(t, "istiod-b's report naming "+m.proxy, 30*time.Second, func() bool {
		r := m.state()
		return r.Phase == ca.PhasePrepare && slices.Contains(r.Replicas["istiod-b"].Unacked, m.proxy)
	})
	lapsed := time.Now()
	lnk.Cut()
	// When istiod-b's Lease lapses; at the cut for a replica without one.
	lease, err := client.CoordinationV1().Leases(ns).Get(ctx, "istiod-b", metav1.GetOptions{})
	switch {
	case err == nil:
		lapsed = lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	case !apierrors.IsNotFound(err):
		t.Fatal(err)
	}
	// A tick of istiod-a after the Lease lapsed: istiod-a saves its report
	// (made at the tick's start) after it has asked which replicas run.
	waitFor(t, "a report of istiod-a made after istiod-b's Lease lapsed", 30*time.Second, func() bool {
		r := m.state()
		return r.Phase != ca.PhasePrepare || r.Replicas["istiod-a"].At.After(lapsed.Add(time.Second))
	})
	m.holds("running but silent (istiod-b)")
	if rep := m.state().Replicas["istiod-b"]; !rep.At.Before(lapsed) || !slices.Contains(rep.Unacked, m.proxy) {
		t.Fatalf("istiod-b reported through the cut link: %+v", rep)
	}

	if err := client.CoreV1().Pods(ns).Delete(ctx, "istiod-b", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "activation once istiod-b's pod is gone", 30*time.Second, func() bool { return m.state().Phase == ca.PhaseActivate })
}

// rotationPair is two istiods of one CA with a proxy on the second that
// never ACKs a trust bundle: istiod-a (writing istio-ca-root-cert) and
// istiod-b, which reaches the API server with bKubeconfig.
type rotationPair struct {
	a, b *istiod
	// proxy is the proxy's name in the rotation's reports.
	proxy string
	// state reads the rotation state.
	state func() *ca.Rotation
	// holds waits until istiod-a logs that it waits for what, or the
	// rotation leaves prepare, and fails in the second case.
	holds func(what string)
}

func newRotationPair(t *testing.T, env *testenv.Env, ns, bKubeconfig string) *rotationPair {
	t.Helper()
	opts := func(c *bootstrap.Config) {
		c.RootRotationTick, c.RootRotationGrace = 100*time.Millisecond, time.Millisecond
	}
	m := &rotationPair{}
	m.a = newIstiodIn(t, env, "istiod-a", ns, istiodKubeconfig(t, env, ns), opts)
	m.a.run(t)
	waitFor(t, "istiod-a ready and writing istio-ca-root-cert", 60*time.Second, func() bool { return m.a.ready() && m.a.leading() })
	m.b = newIstiodIn(t, env, "istiod-b", ns, bKubeconfig, opts)
	m.b.run(t)
	waitFor(t, "istiod-b ready", 60*time.Second, m.b.ready)

	app := env.Namespace(t)
	roots := m.b.roots(t, env)
	proxy := m.b.dialADS(t, roots, m.b.workloadCert(t, env, roots, app, "app"), app, "app")
	proxy.subscribe(typeCluster)
	m.proxy = "app-1." + app

	store := secretstore.NewRotationStore(env.Client(t).CoreV1(), ns)
	m.state = func() *ca.Rotation {
		t.Helper()
		r, _, err := store.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	m.holds = func(what string) {
		t.Helper()
		waitFor(t, "istiod-a waiting for "+what, 30*time.Second, func() bool {
			return strings.Contains(m.a.logs.String(), what) || m.state().Phase != ca.PhasePrepare
		})
		if r := m.state(); r.Phase != ca.PhasePrepare {
			t.Fatalf("the rotation moved to %q while istiod-b, cut off, serves %s without the new root", r.Phase, m.proxy)
		}
	}
	return m
}

// runningReplicas are the replicas that run, as `istiod ca status` asks.
func runningReplicas(t *testing.T, env *testenv.Env, ns string) []string {
	t.Helper()
	authority, err := bootstrap.NewCA(operatorConfig(env, ns), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r, err := authority.Rotator().State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	running, known, err := authority.Rotator().RunningReplicas(context.Background(), r)
	if err != nil || !known {
		t.Fatalf("running replicas: %v (known %v)", err, known)
	}
	return running
}

func operatorConfig(env *testenv.Env, ns string) bootstrap.Config {
	cfg := bootstrap.DefaultConfig()
	cfg.Kubeconfig, cfg.Namespace = env.Kubeconfig, ns
	return cfg
}

// requestRotation begins a rotation as `istiod ca rotate` does, again if a
// replica wrote the state meanwhile.
func requestRotation(t *testing.T, env *testenv.Env, ns string) {
	t.Helper()
	authority, err := bootstrap.NewCA(operatorConfig(env, ns), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := authority.Rotator().Request(context.Background()); err != nil; _, err = authority.Rotator().Request(context.Background()) {
		if !errors.Is(err, ca.ErrRotationConflict) {
			t.Fatalf("request rotation: %v", err)
		}
	}
}

// replicaRBAC is the ServiceAccount of a second istiod, bound to the
// ClusterRole and Role of docs/rbac.md, whose right to update
// istio-ca-rotation the test can take away and give back.
type replicaRBAC struct {
	client kubernetes.Interface
	ns, sa string
}

func newReplicaRBAC(t *testing.T, client kubernetes.Interface, ns, sa string) *replicaRBAC {
	t.Helper()
	ctx := context.Background()
	full, err := client.RbacV1().Roles(ns).Get(ctx, "istiod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cut := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "istiod-cut-off"}}
	for _, rule := range full.Rules {
		if !slices.Contains(rule.ResourceNames, secretstore.RotationSecretName) {
			cut.Rules = append(cut.Rules, rule)
		}
	}
	if len(cut.Rules) != len(full.Rules)-1 {
		t.Fatalf("the Role istiod has no rule of its own for %s: %+v", secretstore.RotationSecretName, full.Rules)
	}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, cut, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "istiod-clusterrole-" + ns},
		Subjects:   subject,
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) })
	r := &replicaRBAC{client: client, ns: ns, sa: sa}
	r.bind(t, "istiod", "istiod-cut-off")
	return r
}

// cutOff takes away the update of istio-ca-rotation; restore gives it
// back. The new binding is made before the old one goes, so that nothing
// else is refused meanwhile.
func (r *replicaRBAC) cutOff(t *testing.T) {
	r.bind(t, "istiod-cut-off", "istiod")
	r.waitAllowed(t, false)
}

func (r *replicaRBAC) restore(t *testing.T) {
	r.bind(t, "istiod", "istiod-cut-off")
	r.waitAllowed(t, true)
}

// waitAllowed waits until the API server's authorizer says whether the
// ServiceAccount may update istio-ca-rotation as want.
func (r *replicaRBAC) waitAllowed(t *testing.T, want bool) {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:" + r.ns + ":" + r.sa,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: r.ns, Verb: "update", Resource: "secrets", Name: secretstore.RotationSecretName,
		},
	}}
	waitFor(t, fmt.Sprintf("%s allowed to update %s: %v", r.sa, secretstore.RotationSecretName, want), 30*time.Second, func() bool {
		got, err := r.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		return err == nil && got.Status.Allowed == want
	})
}

func (r *replicaRBAC) bind(t *testing.T, role, from string) {
	t.Helper()
	ctx := context.Background()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: r.sa + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: r.sa, Namespace: r.ns}},
	}
	if _, err := r.client.RbacV1().RoleBindings(r.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.client.RbacV1().RoleBindings(r.ns).Delete(ctx, r.sa+"-"+from, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
