package helm

import (
	"reflect"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// global.readerSecrets adds to the reader's ClusterRole exactly the rules
// of docs/rbac.md's remote-reader-secrets block, for a primary's install
// and for a remote profile's; without it the reader's rules are the
// remote-reader block's alone.
func TestReaderSecretsAddsExactlyTheDocsRules(t *testing.T) {
	var reader, secrets rbacv1.ClusterRole
	docPrimaryRemote(t, "remote-reader", &reader)
	docPrimaryRemote(t, "remote-reader-secrets", &secrets)
	remote := remoteCases["profile remote, as Istio's docs install it"]
	if remote == nil {
		t.Fatal("no remote profile case")
	}
	for name, base := range map[string]map[string]any{"primary": {}, "remote profile": remote} {
		for _, on := range []bool{false, true} {
			vals := deepCopy(base)
			global, _ := vals["global"].(map[string]any)
			if global == nil {
				global = map[string]any{}
				vals["global"] = global
			}
			global["readerSecrets"] = on
			want := slices.Clone(reader.Rules)
			if on {
				want = append(want, secrets.Rules...)
			}
			r := mustRender(t, Options{Values: vals})
			found := false
			for _, u := range ofKind(r, "ClusterRole") {
				if u.GetName() != reader.Name {
					continue
				}
				found = true
				obj, err := toTyped(u)
				if err != nil {
					t.Fatal(err)
				}
				if got := obj.(*rbacv1.ClusterRole).Rules; !reflect.DeepEqual(got, want) {
					t.Errorf("%s, readerSecrets=%v: the reader's rules\n%+v\nwant docs/rbac.md's\n%+v", name, on, got, want)
				}
			}
			if !found {
				t.Errorf("%s, readerSecrets=%v: no ClusterRole %s", name, on, reader.Name)
			}
		}
	}
}
