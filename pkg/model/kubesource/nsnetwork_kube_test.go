package kubesource

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestSystemNamespaceNetworkAgainstAPIServer: a remote cluster's source,
// reading as the chart's remote reader (the one namespace by name, no
// other), follows the network label of that namespace: set, changed and
// removed (meshNetworks' network again), while a pod's own label wins.
func TestSystemNamespaceNetworkAgainstAPIServer(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	admin := c.kube
	user := "reader-" + c.ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "services", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{c.ns}, Verbs: []string{"get", "list", "watch"}},
	}}
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	check(t, "create ClusterRole", err)
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(ctx, user, metav1.DeleteOptions{}) })
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}, metav1.CreateOptions{})
	check(t, "create ClusterRoleBinding", err)
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, user, metav1.DeleteOptions{}) })
	cfg := rest.CopyConfig(testenv.Get(t).Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	reader, err := kubernetes.NewForConfig(cfg)
	check(t, "reader client", err)

	relabel := func(network string) {
		t.Helper()
		ns, err := admin.CoreV1().Namespaces().Get(ctx, c.ns, metav1.GetOptions{})
		check(t, "get namespace", err)
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		delete(ns.Labels, model.NetworkLabel)
		if network != "" {
			ns.Labels[model.NetworkLabel] = network
		}
		_, err = admin.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
		check(t, "label namespace", err)
	}
	relabel("net-ns")
	c.create(t, newService(c.ns, "echo", map[string]string{"app": "echo"}, servicePort("http", 80, intstr.FromInt32(8080))))
	c.pod(t, "a", "default", "10.4.0.1", map[string]string{"app": "echo"})
	c.pod(t, "b", "default", "10.4.0.2", map[string]string{"app": "echo", model.NetworkLabel: "net-pod"})
	c.create(t, newSlice(c.ns, "echo-1", "echo", map[string]int32{"http": 8080}, podEndpoint(c.ns, "a", "10.4.0.1"), podEndpoint(c.ns, "b", "10.4.0.2")))

	store := &recorder{Store: model.NewStore()}
	src, err := New(Config{Client: reader, Publisher: store, EndpointsOnly: true, ClusterID: "remote", Network: "net-mesh",
		SystemNamespace: c.ns, Logger: testLogger(t)})
	check(t, "New", err)
	runSource(t, src)
	host := "echo." + c.ns + ".svc.cluster.local"
	want := func(a string) func(*model.Snapshot) bool {
		return func(s *model.Snapshot) bool {
			svc := s.Service(host)
			pa, pb := s.Pod(c.ns, "a"), s.Pod(c.ns, "b")
			if svc == nil || len(svc.Endpoints[80]) != 2 || pa == nil || pb == nil {
				return false
			}
			eps := svc.Endpoints[80]
			return eps[0].Network == a && pa.Network == a && eps[1].Network == "net-pod" && pb.Network == "net-pod"
		}
	}
	waitFor(t, store.Store, "the namespace's network", want("net-ns"))
	relabel("net-ns2")
	waitFor(t, store.Store, "the relabelled namespace's network", want("net-ns2"))
	relabel("")
	waitFor(t, store.Store, "meshNetworks' network without the label", want("net-mesh"))
	if _, err := reader.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("the reader may list every namespace: the test proves less than it says")
	}
}
