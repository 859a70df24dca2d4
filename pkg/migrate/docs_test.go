package migrate

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The migration guide's links into the README lead to headings, and the
// README links to the guide.
func TestMigrationGuideLinksLeadSomewhere(t *testing.T) {
	guide, err := os.ReadFile("../../docs/migrating-from-istio.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(docs/migrating-from-istio.md)") {
		t.Error("the README does not link to docs/migrating-from-istio.md")
	}
	headings := map[string]bool{}
	for _, l := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#"))) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				b.WriteRune(r)
			}
		}
		headings[b.String()] = true
	}
	links := regexp.MustCompile(`\]\(\.\./README\.md#([^)]+)\)`).FindAllStringSubmatch(string(guide), -1)
	if len(links) == 0 {
		t.Fatal("the guide links to no README section")
	}
	for _, m := range links {
		if !headings[m[1]] {
			t.Errorf("the guide links to README.md#%s, which is no heading", m[1])
		}
	}
}
