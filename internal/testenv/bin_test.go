package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMissingBinariesNameTheMakeTarget(t *testing.T) {
	dir := t.TempDir()
	_, err := binariesIn(dir)
	if err == nil {
		t.Fatal("binariesIn an empty directory: no error")
	}
	for _, want := range []string{"make testenv", filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "etcd")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestBinariesFoundInTheirDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := binariesIn(dir)
	if err != nil {
		t.Fatalf("binariesIn: %v", err)
	}
	if b.apiserver != filepath.Join(dir, "kube-apiserver") || b.etcd != filepath.Join(dir, "etcd") {
		t.Errorf("found %+v", b)
	}
}

func TestRepoRootIsTheBulwarkModule(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("repoRoot: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if got := moduleName(data); got != modulePath {
		t.Errorf("module at %s = %q, want %q", root, got, modulePath)
	}
}

func TestNamespacePrefix(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"a plain name is lowercased":        {"TestFoo", "testfoo-"},
		"subtest separators become dashes":  {"TestFoo/bar_baz", "testfoo-bar-baz-"},
		"long names are cut to fit a label": {strings.Repeat("x", 80), strings.Repeat("x", 40) + "-"},
		"a leading digit gets a prefix":     {"1abc", "t-1abc-"},
		"symbols only still make a label":   {"///", "t-"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := namespacePrefix(tc.in); got != tc.want {
				t.Errorf("namespacePrefix(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
