package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

var readerBlock = regexp.MustCompile("(?s)```yaml remote-reader\n(.*?)```")

// docReaderRules reads the remote reader's ClusterRole of docs/rbac.md,
// which test/interop grants to the reader of each remote cluster.
func docReaderRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	path := filepath.Join(ChartDir(), "..", "..", "docs", "rbac.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := readerBlock.FindStringSubmatch(string(doc))
	if m == nil {
		t.Fatalf("%s: no remote-reader block", path)
	}
	var cr rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict([]byte(m[1]), &cr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cr.Rules
}

// The reader is docs/rbac.md's (what a remote istiod reads: TokenReviews
// of this cluster's pod tokens and the objects of endpoint discovery), and
// reaches no Secret or ConfigMap, which Istio's reader ClusterRole does.
func TestRemoteReaderReadsWhatRemoteIstiodsNeed(t *testing.T) {
	readerRules := docReaderRules(t)
	for _, rule := range readerRules {
		for _, res := range []string{"secrets", "configmaps", "*"} {
			if slices.Contains(rule.Resources, res) {
				t.Errorf("the reader may %v %s", rule.Verbs, res)
			}
		}
	}
	for name, c := range map[string]struct {
		opts             Options
		role, saName, ns string
		createsSA        bool
		release          string // the release's namespace, if not istio-system
	}{
		"default": {
			role: "istio-reader-clusterrole-istio-system", saName: "istio-reader-service-account", ns: "istio-system", createsSA: true,
		},
		"other namespace": {
			opts: renderCases["other-namespace"].opts,
			role: "istio-reader-clusterrole-mesh-system", saName: "istio-reader-service-account", ns: "mesh-system", createsSA: true,
			release: "mesh-system",
		},
		// A canary binds the default revision's account and creates none.
		"canary": {
			opts: renderCases["canary"].opts,
			role: "istio-reader-clusterrole-canary-istio-system", saName: "istio-reader-service-account", ns: "istio-system",
		},
		"a reader account of the operator's": {
			opts: Options{Values: map[string]any{"global": map[string]any{"readerServiceAccount": map[string]any{"name": "mesh-reader", "namespace": "readers"}}}},
			role: "istio-reader-clusterrole-istio-system", saName: "mesh-reader", ns: "readers",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, c.opts)
			cr := reader[*rbacv1.ClusterRole](t, r, "ClusterRole")
			if cr.Name != c.role {
				t.Errorf("ClusterRole %s, want Istio's name %s", cr.Name, c.role)
			}
			// The doc's rules name istiod's namespace istio-system.
			if want := releaseRules(readerRules, c.release); !reflect.DeepEqual(cr.Rules, want) {
				t.Errorf("reader rules:\n%+v\nwant\n%+v", cr.Rules, want)
			}
			crb := reader[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding")
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: c.saName, Namespace: c.ns}}
			if crb.Name != c.role || crb.RoleRef.Name != c.role || !reflect.DeepEqual(crb.Subjects, want) {
				t.Errorf("binding %s -> %s for %+v; want %s -> %s for %+v", crb.Name, crb.RoleRef.Name, crb.Subjects, c.role, c.role, want)
			}
			var sas []*corev1.ServiceAccount
			for _, u := range ofKind(r, "ServiceAccount") {
				if !isReader(u) {
					continue
				}
				obj, err := toTyped(u)
				if err != nil {
					t.Fatal(err)
				}
				sas = append(sas, obj.(*corev1.ServiceAccount))
			}
			switch {
			case !c.createsSA && len(sas) != 0:
				t.Errorf("%d reader ServiceAccounts rendered, want none", len(sas))
			case c.createsSA && len(sas) != 1:
				t.Fatalf("%d reader ServiceAccounts rendered, want 1", len(sas))
			case c.createsSA:
				if sa := sas[0]; sa.Name != c.saName || sa.Namespace != c.ns || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
					t.Errorf("reader ServiceAccount %s/%s automount %v; want %s/%s, not mounted", sa.Namespace, sa.Name, sa.AutomountServiceAccountToken, c.ns, c.saName)
				}
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		r := mustRender(t, Options{Values: map[string]any{"global": map[string]any{"enableReaderRBAC": false}}})
		for _, u := range r.Objects {
			if isReader(u) {
				t.Errorf("%s rendered with enableReaderRBAC off", objectKey(u))
			}
		}
	})
}

// releaseRules is rules with the namespace the doc names by name,
// istio-system, replaced by release when set.
func releaseRules(rules []rbacv1.PolicyRule, release string) []rbacv1.PolicyRule {
	if release == "" {
		return rules
	}
	out := make([]rbacv1.PolicyRule, len(rules))
	for i, r := range rules {
		out[i] = r
		if slices.Contains(r.Resources, "namespaces") {
			out[i].ResourceNames = []string{release}
		}
	}
	return out
}
