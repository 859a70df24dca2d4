package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	modulePath = "github.com/bulwark-mesh/bulwark"
)

// binaries are the paths of the programs the environment runs.
type binaries struct {
	etcd      string
	apiserver string
}

// findBinaries locates etcd and kube-apiserver in .cache/testenv/bin at
// the repository root, where `make testenv` builds them.
func findBinaries() (binaries, error) {
	root, err := repoRoot()
	if err != nil {
		return binaries{}, fmt.Errorf("locate test binaries: %w", err)
	}
	return binariesIn(filepath.Join(root, ".cache", "testenv", "bin"))
}

// binariesIn checks that dir holds both programs.
func binariesIn(dir string) (binaries, error) {
	b := binaries{
		etcd:      filepath.Join(dir, "etcd"),
		apiserver: filepath.Join(dir, "kube-apiserver"),
	}
	var missing []string
	for _, p := range []string{b.etcd, b.apiserver} {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return binaries{}, fmt.Errorf("test binaries missing: %s; run `make testenv` at the repository root to build them",
			strings.Join(missing, ", "))
	}
	return b, nil
}

// repoRoot walks up from the working directory (a test runs in its
// package's directory) to the go.mod of the Bulwark module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && moduleName(data) == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

// moduleName returns the path on the module line of a go.mod file.
func moduleName(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], "\"`")
		}
	}
	return ""
}
