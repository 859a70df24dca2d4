// Package nocrd_test runs a kubesource.Source against a real apiserver that
// starts without the Istio CRDs. It is a package of its own so that its
// apiserver is not the one of kubesource's tests, which install the CRDs.
package nocrd_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	securityv1 "istio.io/api/security/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

const waitTimeout = 30 * time.Second

func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestIstioCRDsInstalledAfterStart(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns, kube := env.Namespace(t), env.Client(t)
	_, err := kube.Discovery().ServerResourcesForGroupVersion("security.istio.io/v1")
	if err == nil {
		t.Fatal("the apiserver serves security.istio.io/v1 already; this package's tests must start without the Istio CRDs")
	}
	crds, err := filepath.Glob("../../../../charts/istiod/crds/*.yaml")
	if err != nil || len(crds) != 4 {
		t.Fatalf("Istio CRDs of the chart: %v %v", crds, err)
	}
	t.Cleanup(func() { uninstallCRDs(t, env.Config, kube) })
	logs, _ := logtest.New(t)
	store := model.NewStore()
	src := runSource(t, env.Config, store, logs)
	eventually(t, "synced without the CRDs", src.HasSynced)
	// The chart's four kinds, and Gateway, VirtualService, ServiceEntry,
	// Sidecar and Telemetry.
	if n := logs.Count("not installed; no"); n != 9 {
		t.Errorf("%d kinds logged missing, want 9", n)
	}
	_, err = kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}},
	}, metav1.CreateOptions{})
	check(t, "create service", err)
	host := "echo." + ns + ".svc.cluster.local"
	waitFor(t, store, "echo", func(s *model.Snapshot) bool { return s.Service(host) != nil })

	t.Run("kinds installed later are picked up", func(t *testing.T) {
		env.InstallCRDs(t, crds...)
		istio := istioClient(t, env.Config)
		dr := &istionetworking.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "echo"}}
		dr.Spec.Host = "echo"
		_, err := istio.NetworkingV1().DestinationRules(ns).Create(ctx, dr, metav1.CreateOptions{})
		check(t, "create DestinationRule", err)
		_, err = istio.SecurityV1().AuthorizationPolicies(ns).Create(ctx, denyEcho(), metav1.CreateOptions{})
		check(t, "create AuthorizationPolicy", err)
		waitFor(t, store, "the DestinationRule and the DENY policy", func(s *model.Snapshot) bool {
			return s.DestinationRuleFor(host, ns, nil) != nil && len(s.AuthorizationPolicies(ns, map[string]string{"app": "echo"})) == 1
		})
	})

	t.Run("a served kind it may not read keeps a source unsynced", func(t *testing.T) {
		env.InstallCRDs(t, crds...)
		role := grantAllButAuthorizationPolicies(t, kube, ns)
		cfg := env.RESTConfigForToken(env.ServiceAccountToken(t, ns, "istiod", nil, nil))
		logs, _ := logtest.New(t)
		store := model.NewStore()
		src := runSource(t, cfg, store, logs)
		eventually(t, "a report of only the AuthorizationPolicies pending", func() bool {
			return logs.Count("waiting for Kubernetes caches to sync", "pending=[authorizationpolicies]") > 0 &&
				logs.Count("Kubernetes list or watch failed", "resource=authorizationpolicies", "forbidden") > 0
		})
		if src.HasSynced() || store.Current().Version != "" {
			t.Fatalf("synced %t, published %q, without reading the AuthorizationPolicies", src.HasSynced(), store.Current().Version)
		}

		role.Rules = append(role.Rules, rbacv1.PolicyRule{
			APIGroups: []string{"security.istio.io"}, Resources: []string{"authorizationpolicies"}, Verbs: []string{"list", "watch"},
		})
		_, err := kube.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		check(t, "grant AuthorizationPolicies", err)
		eventually(t, "synced once they are readable", src.HasSynced)
		if got := store.Current().AuthorizationPolicies(ns, map[string]string{"app": "echo"}); len(got) != 1 {
			t.Errorf("the first snapshot has %d DENY policies for echo, want 1", len(got))
		}
	})
}

// uninstallCRDs deletes the Istio CRDs and waits until the apiserver no
// longer serves them, so that the test can run again (-count).
func uninstallCRDs(t *testing.T, cfg *rest.Config, kube kubernetes.Interface) {
	t.Helper()
	client, err := dynamic.NewForConfig(rest.CopyConfig(cfg))
	check(t, "dynamic client", err)
	crds := client.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, name := range []string{
		"peerauthentications.security.istio.io", "authorizationpolicies.security.istio.io",
		"requestauthentications.security.istio.io", "destinationrules.networking.istio.io",
	} {
		if err := crds.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete CRD %s: %v", name, err)
		}
	}
	eventually(t, "the Istio CRDs gone", func() bool {
		for _, gv := range []string{"security.istio.io/v1", "networking.istio.io/v1"} {
			if _, err := kube.Discovery().ServerResourcesForGroupVersion(gv); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
}

func istioClient(t *testing.T, cfg *rest.Config) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(rest.CopyConfig(cfg))
	check(t, "Istio client", err)
	return c
}

// runSource runs a source reading the cluster as cfg, with fast polls,
// until the test ends.
func runSource(t *testing.T, cfg *rest.Config, store *model.Store, logs *logtest.Recorder) *kubesource.Source {
	t.Helper()
	kube, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	check(t, "client", err)
	src, err := kubesource.New(kubesource.Config{
		Client: kube, Istio: istioClient(t, cfg), Publisher: store, Logger: slog.New(logs),
		SyncReport: 50 * time.Millisecond, CRDPoll: 50 * time.Millisecond,
	})
	check(t, "New", err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return src
}

func denyEcho() *istiosecurity.AuthorizationPolicy {
	ap := &istiosecurity.AuthorizationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-echo"}}
	ap.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}}
	ap.Spec.Action = securityv1.AuthorizationPolicy_DENY
	ap.Spec.Rules = []*securityv1.Rule{{}}
	return ap
}

// grantAllButAuthorizationPolicies lets the ServiceAccount ns/istiod read
// cluster-wide everything a source reads but AuthorizationPolicies, and
// returns the ClusterRole.
func grantAllButAuthorizationPolicies(t *testing.T, kube kubernetes.Interface, ns string) *rbacv1.ClusterRole {
	t.Helper()
	ctx, read := context.Background(), []string{"list", "watch"}
	role, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-model"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "pods", "nodes"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{"security.istio.io"}, Resources: []string{"peerauthentications", "requestauthentications"}, Verbs: read},
			{APIGroups: []string{"networking.istio.io"}, Resources: []string{"destinationrules"}, Verbs: read},
		},
	}, metav1.CreateOptions{})
	check(t, "create ClusterRole", err)
	t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}) })
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "istiod"}},
	}, metav1.CreateOptions{})
	check(t, "create ClusterRoleBinding", err)
	t.Cleanup(func() { _ = kube.RbacV1().ClusterRoleBindings().Delete(ctx, role.Name, metav1.DeleteOptions{}) })
	return role
}

// waitFor waits until the store's snapshot satisfies cond.
func waitFor(t *testing.T, store *model.Store, what string, cond func(*model.Snapshot) bool) {
	t.Helper()
	updates, cancel := store.Subscribe()
	defer cancel()
	timeout := time.After(waitTimeout)
	for snap := store.Current(); !cond(snap); {
		select {
		case snap = <-updates:
		case <-timeout:
			t.Fatalf("no snapshot with %s; the last is version %q", what, snap.Version)
		}
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}
