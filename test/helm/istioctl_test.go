package helm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// istioctlBinary is Istio's istioctl, built from the module the interop
// tests pin it with (test/interop/istioctl) into the repository's ignored
// .cache; an up-to-date binary is not rebuilt.
var istioctlBinary = sync.OnceValues(func() (string, error) {
	root := filepath.Join(ChartDir(), "..", "..")
	out := filepath.Join(root, ".cache", "helm", "bin", "istioctl")
	cmd := exec.Command("go", "build", "-o", out, "istio.io/istio/istioctl/cmd/istioctl")
	cmd.Dir = filepath.Join(root, "test", "interop", "istioctl")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build istioctl: %w\n%s", err, b)
	}
	return out, nil
})

// runIstioctl runs istioctl on the test apiserver with istiod's namespace
// ns; it returns the combined output and the error of a failed run.
func runIstioctl(t *testing.T, c *cluster, ns string, args ...string) (string, error) {
	t.Helper()
	bin, err := istioctlBinary()
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--kubeconfig", c.env.Kubeconfig, "--istioNamespace", ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// checkIstioctlAnalyze runs `istioctl analyze` and `istioctl x precheck`
// on the cluster the release is installed in and istiod runs against:
// neither reports an error or a warning about the release's objects.
func (r *releaseRun) checkIstioctlAnalyze(t *testing.T) {
	t.Helper()
	out, err := runIstioctl(t, r.c, r.ns, "analyze", "--all-namespaces")
	t.Logf("istioctl analyze --all-namespaces:\n%s", out)
	if err != nil && !strings.Contains(out, "Warning") && !strings.Contains(out, "Error") {
		t.Errorf("istioctl analyze: %v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if (strings.HasPrefix(line, "Error") || strings.HasPrefix(line, "Warning")) && r.about(line) {
			t.Errorf("istioctl analyze reports the release's objects: %s", line)
		}
	}
	out, err = runIstioctl(t, r.c, r.ns, "x", "precheck")
	t.Logf("istioctl x precheck:\n%s", out)
	if err != nil {
		t.Errorf("istioctl x precheck: %v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "Error") || (strings.HasPrefix(line, "Warning") && r.about(line)) {
			t.Errorf("istioctl x precheck: %s", line)
		}
	}
}

// about reports whether an analyzer message names the release's
// namespace or one of its objects.
func (r *releaseRun) about(line string) bool {
	if strings.Contains(line, r.ns) {
		return true
	}
	for _, obj := range r.manifests {
		if strings.Contains(line, " "+obj.GetName()+" ") || strings.Contains(line, obj.GetKind()+" "+obj.GetName()) {
			return true
		}
	}
	return false
}
