package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// docRules reads the ClusterRole and Role manifests of docs/rbac.md, which
// test/kube grants to the istiod it runs.
func docRules(t *testing.T) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	path := filepath.Join(ChartDir(), "..", "..", "docs", "rbac.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range yamlBlock.FindAllStringSubmatch(string(doc), -1) {
		for _, manifest := range strings.Split(block[1], "\n---\n") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(manifest), &meta); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			switch meta.Kind {
			case "ClusterRole":
				var o rbacv1.ClusterRole
				if err := yaml.UnmarshalStrict([]byte(manifest), &o); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				cluster = o.Rules
			case "Role":
				var o rbacv1.Role
				if err := yaml.UnmarshalStrict([]byte(manifest), &o); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				namespaced = o.Rules
			}
		}
	}
	if cluster == nil || namespaced == nil {
		t.Fatalf("%s: want a ClusterRole and a Role manifest", path)
	}
	return cluster, namespaced
}

// The end-to-end tests of test/kube run istiod with the rules of
// docs/rbac.md; they are the chart's rules only if the two are equal.
func TestRBACDocIsTheChart(t *testing.T) {
	r := mustRender(t, Options{})
	cluster, namespaced := docRules(t)
	for _, c := range []struct {
		kind       string
		chart, doc []rbacv1.PolicyRule
	}{
		{"ClusterRole", only[*rbacv1.ClusterRole](t, r, "ClusterRole").Rules, cluster},
		{"Role", only[*rbacv1.Role](t, r, "Role").Rules, namespaced},
	} {
		if !reflect.DeepEqual(c.chart, c.doc) {
			t.Errorf("docs/rbac.md's %s differs from the chart's:\nchart: %+v\ndoc:   %+v", c.kind, c.chart, c.doc)
		}
	}
}
