package authz

import (
	"slices"
	"testing"
)

func TestPrincipalsCoverEveryTrustDomainOfTheBundle(t *testing.T) {
	bundle := []string{"new.td", "old.td"}
	for name, tc := range map[string]struct {
		principal string
		want      []string
	}{
		"the mesh's own trust domain is every one of the bundle": {"new.td/ns/a/sa/b", []string{"new.td/ns/a/sa/b", "old.td/ns/a/sa/b"}},
		"an alias is every one of the bundle":                    {"old.td/ns/a/sa/b", []string{"new.td/ns/a/sa/b", "old.td/ns/a/sa/b"}},
		"cluster.local is every one of the bundle":               {"cluster.local/ns/a/sa/b", []string{"new.td/ns/a/sa/b", "old.td/ns/a/sa/b"}},
		"another trust domain stays as written":                  {"other.org/ns/a/sa/b", []string{"other.org/ns/a/sa/b"}},
		"a trailing * that matches is every one of the bundle":   {"new*/ns/a/sa/b", []string{"new.td/ns/a/sa/b", "old.td/ns/a/sa/b"}},
		"a leading * is kept for the domains it matches":         {"*.td/ns/a/sa/b", []string{"*.td/ns/a/sa/b"}},
		"a leading * that matches none stays as written":         {"*.org/ns/a/sa/b", []string{"*.org/ns/a/sa/b"}},
		"any trust domain stays as written":                      {"*/ns/a/sa/b", []string{"*/ns/a/sa/b"}},
		"a principal of another shape stays as written":          {"ns/a/sa/b", []string{"ns/a/sa/b"}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := inTrustDomains(tc.principal, bundle); !slices.Equal(got, tc.want) {
				t.Errorf("inTrustDomains(%q) = %q, want %q", tc.principal, got, tc.want)
			}
		})
	}
}
