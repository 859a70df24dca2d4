package interop

import (
	"context"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	istiohelm "istio.io/istio/operator/pkg/helm"
	"istio.io/istio/operator/pkg/values"
)

// installRemoteProfile installs into a remote cluster what charts/istiod
// renders there for a primary-remote mesh, as Helm would: the remote
// profile (istiodRemote.enabled) whose webhooks call the primary's istiod
// at url (istiodRemote.injectionURL for cluster-b/net2, and
// base.validationURL), and the primary-remote rules bound to the reader
// account istioctl's remote secret names (istio-system's
// istio-reader-service-account). It fails on any other kind: the remote
// profile installs no istiod. The configurations must be named mutating
// and validating, the names the primary's istiod patches.
func installRemoteProfile(t *testing.T, client kubernetes.Interface, istiodNS, mutating, validating, url string) {
	t.Helper()
	ctx := context.Background()
	vals := map[string]any{
		"istiodRemote": map[string]any{"enabled": true, "injectionURL": url + "/inject/cluster/" + clusterB + "/net/net2"},
		"base":         map[string]any{"validationURL": url + "/validate"},
		"global": map[string]any{
			"multiCluster":         map[string]any{"clusterName": clusterB},
			"network":              "net2",
			"readerServiceAccount": map[string]any{"name": "istio-reader-service-account", "namespace": "istio-system"},
		},
	}
	objs, _, err := istiohelm.Render("istiod", istiodNS, "istiod",
		values.Map{"spec": map[string]any{"values": vals, "installPackagePath": repoRoot}}, nil)
	if err != nil {
		t.Fatalf("render charts/istiod's remote profile: %v", err)
	}
	var kinds []string
	rbac, admission := client.RbacV1(), client.AdmissionregistrationV1()
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		}
		into := func(v any) {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, v, true); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		var err error
		switch o.GetKind() {
		case "CustomResourceDefinition":
			// The chart's crds/ folder, which Istio's renderer appends:
			// Istio's kinds, which this test does not write in B.
			continue
		case "ClusterRole":
			var v rbacv1.ClusterRole
			into(&v)
			_, err = rbac.ClusterRoles().Create(ctx, &v, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var v rbacv1.ClusterRoleBinding
			into(&v)
			_, err = rbac.ClusterRoleBindings().Create(ctx, &v, metav1.CreateOptions{})
		case "Role":
			var v rbacv1.Role
			into(&v)
			_, err = rbac.Roles(istiodNS).Create(ctx, &v, metav1.CreateOptions{})
		case "RoleBinding":
			var v rbacv1.RoleBinding
			into(&v)
			_, err = rbac.RoleBindings(istiodNS).Create(ctx, &v, metav1.CreateOptions{})
		case "MutatingWebhookConfiguration":
			var v admissionregistrationv1.MutatingWebhookConfiguration
			into(&v)
			if v.Name != mutating {
				t.Fatalf("the chart's injection webhook configuration is %s, the primary patches %s", v.Name, mutating)
			}
			_, err = admission.MutatingWebhookConfigurations().Create(ctx, &v, metav1.CreateOptions{})
		case "ValidatingWebhookConfiguration":
			var v admissionregistrationv1.ValidatingWebhookConfiguration
			into(&v)
			if v.Name != validating {
				t.Fatalf("the chart's validating webhook configuration is %s, the primary patches %s", v.Name, validating)
			}
			_, err = admission.ValidatingWebhookConfigurations().Create(ctx, &v, metav1.CreateOptions{})
		default:
			t.Fatalf("the remote profile renders %s %s", o.GetKind(), o.GetName())
		}
		if err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	slices.Sort(kinds)
	t.Logf("charts/istiod's remote profile: %v", kinds)
	for _, want := range []string{"MutatingWebhookConfiguration/" + mutating, "ValidatingWebhookConfiguration/" + validating, "Role/istio-reader-primary-remote"} {
		if !slices.Contains(kinds, want) {
			t.Fatalf("the remote profile lacks %s: %v", want, kinds)
		}
	}
}
