package kube

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// rbacDoc is where istiod's permissions are written down.
const rbacDoc = "../../docs/rbac.md"

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// istiodKubeconfig creates the ServiceAccount istiod in ns, without any
// permission yet, and returns a kubeconfig file that authenticates as it.
func istiodKubeconfig(t *testing.T, env *testenv.Env, ns string) string {
	t.Helper()
	token := env.ServiceAccountToken(t, ns, "istiod", nil, nil)
	return env.KubeconfigForToken(t, token)
}

// grantIstiodRBAC grants the ServiceAccount istiod in ns the manifests of
// docs/rbac.md, with istio-system replaced by ns (which also makes the
// cluster-wide names unique).
func grantIstiodRBAC(t *testing.T, env *testenv.Env, ns string) {
	t.Helper()
	doc, err := os.ReadFile(rbacDoc)
	if err != nil {
		t.Fatal(err)
	}
	client := env.Client(t).RbacV1()
	ctx := context.Background()
	created := 0
	for _, block := range yamlBlock.FindAllStringSubmatch(string(doc), -1) {
		for _, manifest := range strings.Split(block[1], "\n---\n") {
			manifest = strings.ReplaceAll(manifest, "istio-system", ns)
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(manifest), &meta); err != nil {
				t.Fatalf("%s: %v", rbacDoc, err)
			}
			switch meta.Kind {
			case "ClusterRole":
				var o rbacv1.ClusterRole
				mustUnmarshal(t, manifest, &o)
				_, err = client.ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
				t.Cleanup(func() { _ = client.ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{}) })
			case "ClusterRoleBinding":
				var o rbacv1.ClusterRoleBinding
				mustUnmarshal(t, manifest, &o)
				_, err = client.ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
				t.Cleanup(func() { _ = client.ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{}) })
			case "Role":
				var o rbacv1.Role
				mustUnmarshal(t, manifest, &o)
				_, err = client.Roles(ns).Create(ctx, &o, metav1.CreateOptions{})
			case "RoleBinding":
				var o rbacv1.RoleBinding
				mustUnmarshal(t, manifest, &o)
				_, err = client.RoleBindings(ns).Create(ctx, &o, metav1.CreateOptions{})
			default:
				t.Fatalf("%s: unexpected kind %q", rbacDoc, meta.Kind)
			}
			if err != nil {
				t.Fatalf("%s: create %s: %v", rbacDoc, meta.Kind, err)
			}
			created++
		}
	}
	if created != 4 {
		t.Fatalf("%s: %d manifests; want a ClusterRole, a Role and their bindings", rbacDoc, created)
	}
}

func mustUnmarshal(t *testing.T, manifest string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(manifest), into); err != nil {
		t.Fatalf("%s: %v", rbacDoc, err)
	}
}
