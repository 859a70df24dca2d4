package helm

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current chart")

const goldenDir = "testdata/golden"

func goldenPath(name string) string { return filepath.Join(goldenDir, name+".yaml") }

func TestRenderMatchesGolden(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			got := mustRender(t, tc.opts).Manifest
			path := goldenPath(name)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run `go test -run TestRenderMatchesGolden -update` to create it): %v", err)
			}
			if got != string(want) {
				t.Errorf("%s is stale; rerun with -update and review the diff:\n%s", path, firstDiff(string(want), got))
			}
		})
	}
}

// A golden file whose case was removed would never be checked again.
func TestEveryGoldenFileHasACase(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var orphans []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if _, ok := renderCases[name]; !ok || !strings.HasSuffix(f, ".yaml") {
			orphans = append(orphans, f)
		}
	}
	sort.Strings(orphans)
	if len(orphans) > 0 {
		t.Errorf("golden files with no render case (delete them or add the case): %s", strings.Join(orphans, ", "))
	}
}

// firstDiff shows the first differing line with a little context.
func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	n := min(len(wl), len(gl))
	i := 0
	for i < n && wl[i] == gl[i] {
		i++
	}
	from := max(0, i-3)
	var b strings.Builder
	for j := from; j < i; j++ {
		b.WriteString("  " + wl[j] + "\n")
	}
	if i < len(wl) {
		b.WriteString("- " + wl[i] + "\n")
	}
	if i < len(gl) {
		b.WriteString("+ " + gl[i] + "\n")
	}
	return b.String()
}
