package helm

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The remote profile installed by Helm into a real API server: the API
// server takes every object; nothing of istiod is there (no Deployment,
// no ServiceAccount, ConfigMap or Secret); the webhooks call the istiod
// Service on the path of this cluster and network; the Service has no
// selector and its EndpointSlice holds the primary's address; the
// reader's RBAC is docs/rbac.md's, and the API server lets the reader do
// the primary's writes and nothing of istiod's (Secrets, other
// ConfigMaps, other webhook configurations). Uninstalled, it leaves
// nothing. A revision keeps its webhooks off other tests' namespaces.
func TestRemoteProfileHelmInstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := getCluster(t)
	client := c.env.Client(t)
	ns := c.env.Namespace(t)
	before := namespaceContents(t, c, ns)
	chrt, err := LoadChart()
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, c, ns)
	const addr = "10.20.30.40"
	vals := remoteValues(map[string]any{
		"revision": "remote",
		"global":   map[string]any{"remotePilotAddress": addr, "network": "net2", "multiCluster": map[string]any{"clusterName": "cluster-b"}},
	})
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = releaseName, ns, time.Minute
	rel, err := install.Run(chrt, vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s", rel.Info.Status)
	}
	if !strings.Contains(rel.Info.Notes, "No istiod runs in this cluster") {
		t.Errorf("NOTES:\n%s", rel.Info.Notes)
	}
	objs := mustParse(t, rel.Manifest)

	t.Run("nothing of istiod", func(t *testing.T) {
		if deps, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err != nil || len(deps.Items) != 0 {
			t.Errorf("Deployments in %s: %v %v", ns, deps, err)
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "Deployment", "ConfigMap", "Secret", "ServiceAccount", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy":
				t.Errorf("installed %s", objectKey(o))
			}
		}
	})

	svcName := "istiod-remote"
	path := "/inject/cluster/cluster-b/net/net2"
	t.Run("webhooks call the istiod Service, on this cluster's path", func(t *testing.T) {
		m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector-remote-"+ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Webhooks) != 2 {
			t.Errorf("%d webhooks, want a revision's 2", len(m.Webhooks))
		}
		for _, w := range m.Webhooks {
			s := w.ClientConfig.Service
			if s == nil || s.Name != svcName || s.Namespace != ns || s.Path == nil || *s.Path != path || *s.Port != 443 || w.ClientConfig.URL != nil || len(w.ClientConfig.CABundle) != 0 {
				t.Errorf("%s: clientConfig %+v, want Service %s/%s:443%s without a caBundle", w.Name, w.ClientConfig, ns, svcName, path)
			}
		}
		v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "istio-validator-remote-"+ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range v.Webhooks {
			if s := w.ClientConfig.Service; s == nil || s.Name != svcName || *s.Path != "/validate" {
				t.Errorf("%s: clientConfig %+v", w.Name, w.ClientConfig)
			}
		}
	})

	t.Run("the istiod Service reaches the primary's address", func(t *testing.T) {
		svc, err := client.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(svc.Spec.Selector) != 0 || svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == "" {
			t.Errorf("Service %s: type %s, clusterIP %q, selector %v; want a ClusterIP without a selector", svcName, svc.Spec.Type, svc.Spec.ClusterIP, svc.Spec.Selector)
		}
		slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svcName})
		if err != nil || len(slices.Items) != 1 {
			t.Fatalf("EndpointSlices of %s: %v %v", svcName, slices, err)
		}
		es := slices.Items[0]
		ports := map[string]int32{}
		for _, p := range es.Ports {
			ports[*p.Name] = *p.Port
		}
		if len(es.Endpoints) != 1 || !reflect.DeepEqual(es.Endpoints[0].Addresses, []string{addr}) ||
			!reflect.DeepEqual(ports, map[string]int32{"tcp-istiod": 15012, "tcp-webhook": 15017}) {
			t.Errorf("EndpointSlice %s: endpoints %+v, ports %v", es.Name, es.Endpoints, ports)
		}
	})

	t.Run("the reader's RBAC is docs/rbac.md's, and no more", func(t *testing.T) {
		var docReader, docCR rbacv1.ClusterRole
		var docRole rbacv1.Role
		docPrimaryRemote(t, "remote-reader", &docReader)
		docPrimaryRemote(t, "primary-remote-clusterrole", &docCR)
		docPrimaryRemote(t, "primary-remote-role", &docRole)
		mutating, validating := "istio-sidecar-injector-remote-"+ns, "istio-validator-remote-"+ns
		rbac := client.RbacV1()
		for name, want := range map[string][]rbacv1.PolicyRule{
			"istio-reader-clusterrole-remote-" + ns:    releaseRules(docReader.Rules, ns),
			"istio-reader-primary-remote-remote-" + ns: renameWebhooks(docCR.Rules, mutating, validating),
		} {
			cr, err := rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cr.Rules, want) {
				t.Errorf("ClusterRole %s:\n%+v\nwant\n%+v", name, cr.Rules, want)
			}
		}
		role, err := rbac.Roles(ns).Get(ctx, "istio-reader-primary-remote-remote", metav1.GetOptions{})
		if err != nil || !reflect.DeepEqual(role.Rules, docRole.Rules) {
			t.Errorf("Role: %v %+v, want %+v", err, role, docRole.Rules)
		}
		reader := "system:serviceaccount:" + ns + ":istio-reader-service-account"
		other := c.env.Namespace(t)
		for _, a := range []struct {
			attrs authorizationv1.ResourceAttributes
			want  bool
		}{
			{authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: mutating}, true},
			{authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: validating}, true},
			{authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: other}, true},
			{authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: other, Name: "istio-ca-root-cert"}, true},
			{authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns}, true},
			{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: "istio-namespace-controller-election"}, true},
			{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
			{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "namespaces", Name: ns}, true},
			{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: ns, Name: "istio-ca-secret"}, false},
			{authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: other}, false},
			{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: other, Name: "kube-root-ca.crt"}, false},
			{authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "istio-sidecar-injector"}, false},
			{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: "other"}, false},
			{authorizationv1.ResourceAttributes{Verb: "create", Group: "apps", Resource: "deployments", Namespace: ns}, false},
			{authorizationv1.ResourceAttributes{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}, false},
		} {
			if got := may(t, client, reader, a.attrs); got != a.want {
				t.Errorf("the reader may %s %s %s/%s: %t, want %t", a.attrs.Verb, a.attrs.Resource, a.attrs.Namespace, a.attrs.Name, got, a.want)
			}
		}
	})

	if _, err := action.NewUninstall(cfg).Run(releaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	for _, o := range objs {
		res, _, err := c.resourceFor(o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Get(ctx, o.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s still there after uninstall (%v)", describe(o), err)
		}
	}
	if after := namespaceContents(t, c, ns); !slices.Equal(after, before) {
		t.Errorf("after uninstall %s holds %v, before the install %v", ns, after, before)
	}
}

// renameWebhooks are docs/rbac.md's primary-remote rules for a release
// whose webhook configurations have these names.
func renameWebhooks(rules []rbacv1.PolicyRule, mutating, validating string) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, len(rules))
	for i, r := range rules {
		r.ResourceNames = slices.Clone(r.ResourceNames)
		for j, n := range r.ResourceNames {
			switch n {
			case "istio-sidecar-injector":
				r.ResourceNames[j] = mutating
			case "istio-validator-istio-system":
				r.ResourceNames[j] = validating
			}
		}
		out[i] = r
	}
	return out
}

// may asks the API server whether user may do attrs.
func may(t *testing.T, client kubernetes.Interface, user string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}
