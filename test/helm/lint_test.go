package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLintStrictIsClean(t *testing.T) {
	for name, tc := range renderCases {
		t.Run(name, func(t *testing.T) {
			vals, err := MergeValues(tc.opts.ValuesFiles, tc.opts.Values)
			if err != nil {
				t.Fatal(err)
			}
			if err := Lint(tc.opts.Namespace, vals); err != nil {
				t.Errorf("helm lint --strict: %v", err)
			}
		})
	}
}

// `helm lint --strict charts/istiod` with no namespace given lints in
// "default", as the helm command does without a kube context.
func TestLintStrictInDefaultNamespace(t *testing.T) {
	if err := Lint("default", nil); err != nil {
		t.Errorf("helm lint --strict: %v", err)
	}
}

// Each file in testdata/bad-values starts with "# want: <field>": the
// schema must reject it, and the message must name that field.
func TestSchemaRejectsBadValues(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad-values", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no files in testdata/bad-values")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			field, ok := strings.CutPrefix(first, "# want: ")
			if !ok || field == "" {
				t.Fatalf("first line %q: want \"# want: <field>\"", first)
			}
			_, err = Render(Options{ValuesFiles: []string{f}})
			if err == nil {
				t.Fatalf("rendered with %s; want a schema error naming %q", f, field)
			}
			if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), field) {
				t.Errorf("error does not name %q as a schema violation:\n%v", field, err)
			}
			vals, err := MergeValues([]string{f}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := Lint("", vals); err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("helm lint accepted %s or did not name %q: %v", f, field, err)
			}
		})
	}
}
