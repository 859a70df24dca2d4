package helm

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// allowed reports whether rules grant verb on group/resource (name "" for
// collection verbs).
func allowed(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// The rules of docs/rbac.md, in use and planned, and nothing it says is
// not needed.
func TestRBACGrantsWhatIstiodNeeds(t *testing.T) {
	r := mustRender(t, Options{})
	cr := only[*rbacv1.ClusterRole](t, r, "ClusterRole")
	role := only[*rbacv1.Role](t, r, "Role")
	type grant struct{ group, resource, verb, name string }
	cluster := []grant{
		{"authentication.k8s.io", "tokenreviews", "create", ""},
		{"authorization.k8s.io", "subjectaccessreviews", "create", ""},
		{"", "configmaps", "get", ""}, {"", "configmaps", "list", ""}, {"", "configmaps", "watch", ""},
		{"", "configmaps", "create", ""}, {"", "configmaps", "update", ""},
		{"", "namespaces", "get", ""}, {"", "namespaces", "list", ""}, {"", "namespaces", "watch", ""},
		{"", "secrets", "list", ""}, {"", "secrets", "watch", ""},
		{"", "pods", "get", ""}, {"", "pods", "list", ""}, {"", "pods", "watch", ""},
		{"", "nodes", "list", ""}, {"", "nodes", "watch", ""},
		{"", "services", "list", ""}, {"", "services", "watch", ""},
		{"discovery.k8s.io", "endpointslices", "list", ""}, {"discovery.k8s.io", "endpointslices", "watch", ""},
		{"security.istio.io", "peerauthentications", "list", ""}, {"security.istio.io", "peerauthentications", "watch", ""},
		{"security.istio.io", "authorizationpolicies", "list", ""}, {"security.istio.io", "authorizationpolicies", "watch", ""},
		{"security.istio.io", "requestauthentications", "list", ""}, {"security.istio.io", "requestauthentications", "watch", ""},
		{"networking.istio.io", "destinationrules", "list", ""}, {"networking.istio.io", "destinationrules", "watch", ""},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "watch", "istio-sidecar-injector"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "watch", "istio-validator-istio-system"},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", "istio-sidecar-injector"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", "istio-validator-istio-system"},
	}
	for _, g := range cluster {
		if !allowed(cr.Rules, g.group, g.resource, g.verb, g.name) {
			t.Errorf("ClusterRole does not allow %s %s/%s %s", g.verb, g.group, g.resource, g.name)
		}
	}
	clusterDenied := []grant{
		// Secrets are read cluster-wide for credentialName through
		// informers (list, watch), never got by name, never written.
		{"", "secrets", "get", ""}, {"", "secrets", "get", "istio-ca-secret"},
		{"", "secrets", "create", ""}, {"", "secrets", "update", ""}, {"", "secrets", "patch", ""}, {"", "secrets", "delete", ""},
		{"", "configmaps", "patch", ""}, {"", "configmaps", "delete", ""},
		{"", "pods", "create", ""},
		// Nodes are read for their locality labels, never written.
		{"", "nodes", "update", ""}, {"", "nodes", "patch", ""}, {"", "nodes", "delete", ""},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", "someone-elses-webhook"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "watch", "someone-elses-webhook"},
		// istiod updates (pkg/inject/webhookconfig); docs/rbac.md grants no patch.
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch", "istio-sidecar-injector"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "delete", "istio-validator-istio-system"},
	}
	for _, g := range clusterDenied {
		if allowed(cr.Rules, g.group, g.resource, g.verb, g.name) {
			t.Errorf("ClusterRole allows %s %s/%s %s", g.verb, g.group, g.resource, g.name)
		}
	}
	namespaced := []grant{
		{"", "secrets", "get", secretstore.SecretName}, {"", "secrets", "create", ""},
		{"", "secrets", "watch", ""},
		{"", "secrets", "get", secretstore.RotationSecretName}, {"", "secrets", "update", secretstore.RotationSecretName},
		{"coordination.k8s.io", "leases", "create", ""},
		{"coordination.k8s.io", "leases", "get", rootcert.LeaseName},
		{"coordination.k8s.io", "leases", "update", rootcert.LeaseName},
		// Each replica's Lease, named after its pod, for root rotation.
		{"coordination.k8s.io", "leases", "list", ""},
		{"coordination.k8s.io", "leases", "get", "istiod-5d8f7c9b4-x2x7q"},
		{"coordination.k8s.io", "leases", "update", "istiod-5d8f7c9b4-x2x7q"},
	}
	for _, g := range namespaced {
		if !allowed(role.Rules, g.group, g.resource, g.verb, g.name) {
			t.Errorf("Role does not allow %s %s/%s %s", g.verb, g.group, g.resource, g.name)
		}
	}
	namespacedDenied := []grant{
		{"", "secrets", "update", secretstore.SecretName}, {"", "secrets", "delete", secretstore.SecretName},
		{"", "secrets", "update", "cacerts"}, {"", "secrets", "delete", secretstore.RotationSecretName},
		// A replica's Lease goes with its pod (owner reference); istiod
		// deletes none, and watches none.
		{"coordination.k8s.io", "leases", "delete", ""}, {"coordination.k8s.io", "leases", "watch", ""},
		{"coordination.k8s.io", "leases", "patch", rootcert.LeaseName},
		{"", "events", "create", ""},
	}
	for _, g := range namespacedDenied {
		if allowed(role.Rules, g.group, g.resource, g.verb, g.name) {
			t.Errorf("Role allows %s %s/%s %s", g.verb, g.group, g.resource, g.name)
		}
	}
	for _, rule := range slices.Concat(cr.Rules, role.Rules) {
		if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
			t.Errorf("wildcard rule %+v", rule)
		}
	}
}

func TestBindingsPointAtRenderedObjects(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, tc.opts)
			ns := or(tc.opts.Namespace, DefaultNamespace)
			sa := deployment(t, r).Spec.Template.Spec.ServiceAccountName
			crb := only[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding")
			rb := only[*rbacv1.RoleBinding](t, r, "RoleBinding")
			if crb.RoleRef.Name != only[*rbacv1.ClusterRole](t, r, "ClusterRole").Name {
				t.Errorf("ClusterRoleBinding refers to %s", crb.RoleRef.Name)
			}
			if rb.RoleRef.Name != only[*rbacv1.Role](t, r, "Role").Name {
				t.Errorf("RoleBinding refers to %s", rb.RoleRef.Name)
			}
			for _, s := range slices.Concat(crb.Subjects, rb.Subjects) {
				if s.Kind != "ServiceAccount" || s.Name != sa || s.Namespace != ns {
					t.Errorf("subject %+v, want ServiceAccount %s/%s", s, ns, sa)
				}
			}
			mwh := mutatingWebhook(t, r).Name
			env := envOf(deployment(t, r))
			if env["INJECTION_WEBHOOK_CONFIG_NAME"] != mwh || env["VALIDATION_WEBHOOK_CONFIG_NAME"] != validatingWebhook(t, r).Name {
				t.Errorf("istiod is told webhooks %q and %q, the chart renders %q and %q",
					env["INJECTION_WEBHOOK_CONFIG_NAME"], env["VALIDATION_WEBHOOK_CONFIG_NAME"], mwh, validatingWebhook(t, r).Name)
			}
			cr := only[*rbacv1.ClusterRole](t, r, "ClusterRole")
			if !allowed(cr.Rules, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", mwh) {
				t.Errorf("istiod may not update its own webhook %s", mwh)
			}
		})
	}
}

func TestCRDs(t *testing.T) {
	objs, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"authorizationpolicies.security.istio.io", "destinationrules.networking.istio.io",
		"peerauthentications.security.istio.io", "requestauthentications.security.istio.io",
	}
	var names []string
	for _, u := range objs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, crd, true); err != nil {
			t.Errorf("%s: %v", u.GetName(), err)
			continue
		}
		names = append(names, crd.Name)
		if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s: scope %s", crd.Name, crd.Spec.Scope)
		}
		var served []string
		for _, v := range crd.Spec.Versions {
			if v.Served {
				served = append(served, v.Name)
			}
			if v.Storage != (v.Name == "v1") {
				t.Errorf("%s %s: storage %v, want only v1 stored", crd.Name, v.Name, v.Storage)
			}
			if v.Subresources == nil || v.Subresources.Status == nil {
				t.Errorf("%s %s: no status subresource", crd.Name, v.Name)
			}
			s := v.Schema
			if s == nil || s.OpenAPIV3Schema == nil || s.OpenAPIV3Schema.Type != "object" {
				t.Errorf("%s %s: no object schema", crd.Name, v.Name)
				continue
			}
			spec := s.OpenAPIV3Schema.Properties["spec"]
			if spec.Type != "object" || spec.XPreserveUnknownFields == nil || !*spec.XPreserveUnknownFields {
				t.Errorf("%s %s: spec must be an object that keeps unknown fields", crd.Name, v.Name)
			}
		}
		if !slices.Equal(served, []string{"v1", "v1beta1"}) {
			t.Errorf("%s serves %v, want v1 and v1beta1", crd.Name, served)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("CRDs %v, want %v", names, want)
	}
}

// Outside istiod's namespace, Secrets are read for credentialName only
// (gateway servers and DestinationRules, pkg/sds): list and watch, through
// informers, as docs/rbac.md says. A rendered chart whose rules on Secrets
// go further, in any values case, fails here: another verb (get, a write,
// "*"), a rule of another group or resource wildcard that reaches
// Secrets, an aggregated ClusterRole, or a Role or RoleBinding outside the
// release's namespace.
func TestSecretReadsOnlyAsWideAsCredentialsNeed(t *testing.T) {
	reaches := func(r rbacv1.PolicyRule) bool {
		return (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*"))
	}
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, tc.opts)
			ns := or(tc.opts.Namespace, DefaultNamespace)
			var verbs []string
			for _, u := range ofKind(r, "ClusterRole") {
				obj, err := toTyped(u)
				if err != nil {
					t.Fatal(err)
				}
				cr := obj.(*rbacv1.ClusterRole)
				if cr.AggregationRule != nil {
					t.Errorf("ClusterRole %s aggregates other ClusterRoles: its rules are not the chart's to check", cr.Name)
				}
				for _, rule := range cr.Rules {
					if reaches(rule) {
						verbs = append(verbs, rule.Verbs...)
					}
				}
			}
			slices.Sort(verbs)
			if verbs = slices.Compact(verbs); !slices.Equal(verbs, []string{"list", "watch"}) {
				t.Errorf("the ClusterRoles grant %v on Secrets in every namespace, want [list watch] (docs/rbac.md, Secrets)", verbs)
			}
			for _, kind := range []string{"Role", "RoleBinding"} {
				for _, u := range ofKind(r, kind) {
					if u.GetNamespace() != ns {
						t.Errorf("%s %s/%s: outside the release's namespace %s", kind, u.GetNamespace(), u.GetName(), ns)
					}
				}
			}
		})
	}
}
