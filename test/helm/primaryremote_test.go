package helm

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// docPrimaryRemote reads the block named name of docs/rbac.md into out.
func docPrimaryRemote(t *testing.T, name string, out any) {
	t.Helper()
	path := filepath.Join(ChartDir(), "..", "..", "docs", "rbac.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml " + regexp.QuoteMeta(name) + "\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("%s: no %s block", path, name)
	}
	if err := yaml.UnmarshalStrict(m[1], out); err != nil {
		t.Fatalf("%s: %s: %v", path, name, err)
	}
}

// primaryRemoteObjects are the reader-labelled objects named
// istio-reader-primary-remote*.
func primaryRemoteObjects(t *testing.T, r *Rendered) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, u := range r.Objects {
		if !isReader(u) || !strings.HasPrefix(u.GetName(), "istio-reader-primary-remote") {
			continue
		}
		obj, err := toTyped(u)
		if err != nil {
			t.Fatal(err)
		}
		out[u.GetKind()] = obj
	}
	return out
}

// With istiodRemote.enabled, the remote's reader may also write what a
// primary writes there (docs/rbac.md's primary-remote blocks, which
// test/interop grants), bound to the reader account; without it, nothing
// of the kind is rendered. No rule reaches a Secret or every ConfigMap.
func TestPrimaryRemoteRBACIsTheDocs(t *testing.T) {
	var docCR rbacv1.ClusterRole
	var docRole rbacv1.Role
	docPrimaryRemote(t, "primary-remote-clusterrole", &docCR)
	docPrimaryRemote(t, "primary-remote-role", &docRole)
	for _, rule := range append(slices.Clone(docCR.Rules), docRole.Rules...) {
		if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.Verbs, "*") {
			t.Errorf("a primary-remote rule reaches too far: %+v", rule)
		}
		if slices.Contains(rule.Resources, "configmaps") && !slices.Equal(rule.Verbs, []string{"create"}) && !slices.Equal(rule.ResourceNames, []string{"istio-ca-root-cert"}) {
			t.Errorf("a primary-remote rule reads or writes ConfigMaps other than istio-ca-root-cert: %+v", rule)
		}
	}

	if got := primaryRemoteObjects(t, mustRender(t, Options{})); len(got) != 0 {
		t.Errorf("rendered without istiodRemote.enabled: %v", slices.Sorted(maps.Keys(got)))
	}
	r := mustRender(t, Options{Values: deepCopy(remoteCases["remotePilotAddress IPv4"])})
	objs := primaryRemoteObjects(t, r)
	cr, _ := objs["ClusterRole"].(*rbacv1.ClusterRole)
	crb, _ := objs["ClusterRoleBinding"].(*rbacv1.ClusterRoleBinding)
	role, _ := objs["Role"].(*rbacv1.Role)
	rb, _ := objs["RoleBinding"].(*rbacv1.RoleBinding)
	if cr == nil || crb == nil || role == nil || rb == nil {
		t.Fatalf("istiodRemote.enabled renders %v, want a ClusterRole, a Role and their bindings", slices.Sorted(maps.Keys(objs)))
	}
	if cr.Name != docCR.Name || !reflect.DeepEqual(cr.Rules, docCR.Rules) {
		t.Errorf("ClusterRole %s:\n%+v\ndocs/rbac.md's %s:\n%+v", cr.Name, cr.Rules, docCR.Name, docCR.Rules)
	}
	if role.Name != docRole.Name || role.Namespace != docRole.Namespace || !reflect.DeepEqual(role.Rules, docRole.Rules) {
		t.Errorf("Role %s/%s:\n%+v\ndocs/rbac.md's %s/%s:\n%+v", role.Namespace, role.Name, role.Rules, docRole.Namespace, docRole.Name, docRole.Rules)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "istio-reader-service-account", Namespace: DefaultNamespace}}
	if crb.RoleRef.Name != cr.Name || !reflect.DeepEqual(crb.Subjects, want) {
		t.Errorf("ClusterRoleBinding -> %s for %+v, want -> %s for %+v", crb.RoleRef.Name, crb.Subjects, cr.Name, want)
	}
	if rb.RoleRef.Name != role.Name || rb.Namespace != role.Namespace || !reflect.DeepEqual(rb.Subjects, want) {
		t.Errorf("RoleBinding %s -> %s for %+v, want -> %s for %+v", rb.Namespace, rb.RoleRef.Name, rb.Subjects, role.Name, want)
	}
	if objs := ofKind(r, "Deployment"); len(objs) != 0 {
		t.Errorf("istiodRemote.enabled still installs istiod: %v", objectKey(objs[0]))
	}

	canary := mustRender(t, Options{Values: remoteValues(map[string]any{"revision": "canary", "global": map[string]any{"remotePilotAddress": "10.20.30.40"}})})
	cobjs := primaryRemoteObjects(t, canary)
	if ccr, _ := cobjs["ClusterRole"].(*rbacv1.ClusterRole); ccr == nil || ccr.Name != "istio-reader-primary-remote-canary-istio-system" ||
		!slices.ContainsFunc(ccr.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.ResourceNames, "istio-sidecar-injector-canary")
		}) {
		t.Errorf("canary's primary-remote ClusterRole: %+v", cobjs["ClusterRole"])
	}
}

// global.externalIstiod (and Istio's EXTERNAL_ISTIOD) run istiod with
// --external-istiod, and are no longer listed as ignored.
func TestExternalIstiodIsHonoured(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"global.externalIstiod": {"global": map[string]any{"externalIstiod": true}},
		"env.EXTERNAL_ISTIOD":   {"env": map[string]any{"EXTERNAL_ISTIOD": "true"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, Options{Values: vals})
			args := deployment(t, r).Spec.Template.Spec.Containers[0].Args
			if !slices.ContainsFunc(args, func(a string) bool { return a == "--external-istiod" || a == "--external-istiod=true" }) {
				t.Errorf("args %v lack --external-istiod", args)
			}
			if strings.Contains(r.Notes, "externalIstiod") || strings.Contains(r.Notes, "EXTERNAL_ISTIOD") {
				t.Errorf("NOTES list it as ignored:\n%s", r.Notes)
			}
		})
	}
	args := deployment(t, mustRender(t, Options{})).Spec.Template.Spec.Containers[0].Args
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--external-istiod") }) {
		t.Errorf("default args %v ask for --external-istiod", args)
	}
}
