package interop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

// peerBuild holds the processes that play the data plane in the
// pilot-agent tests: Istio's own pilot-agent, and the proxyless gRPC app of
// test/xds. TestMain builds them once per test binary, without -race: they
// are the peers under observation, not the product.
var peerBuild struct {
	peers peers
	err   error
}

type peers struct {
	pilotAgent string
	app        string
	envoy      string // envoystandin: the Envoy binary pilot-agent runs in sidecar mode
	istioctl   string
}

// peerCacheDir keeps the built peers between runs; it is under the
// repository's git-ignored .cache, and `go build -o` leaves an up-to-date
// binary untouched, so a warm run costs about a second.
func peerCacheDir() string { return filepath.Join(repoRoot, ".cache", "interop", "bin") }

func buildPeers() (peers, error) {
	dir := peerCacheDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return peers{}, fmt.Errorf("build peers: %w", err)
	}
	p := peers{pilotAgent: filepath.Join(dir, "pilot-agent"), app: filepath.Join(dir, "xds-app"),
		envoy: filepath.Join(dir, "envoy-standin"), istioctl: filepath.Join(dir, "istioctl")}
	// pilot-agent from the istio.io/istio this module requires (recorded as
	// a tool in go.mod); the app from the root module, which owns it.
	if err := goBuild(".", p.pilotAgent, "istio.io/istio/pilot/cmd/pilot-agent"); err != nil {
		return peers{}, err
	}
	if err := goBuild(repoRoot, p.app, "github.com/bulwark-mesh/bulwark/test/xds/app"); err != nil {
		return peers{}, err
	}
	if err := goBuild(".", p.envoy, "github.com/bulwark-mesh/bulwark/test/interop/envoystandin"); err != nil {
		return peers{}, err
	}
	// istioctl from its own module (./istioctl), which pins the same
	// istio.io/istio with Istio's own dependency versions.
	if err := goBuild("istioctl", p.istioctl, "istio.io/istio/istioctl/cmd/istioctl"); err != nil {
		return peers{}, err
	}
	return p, nil
}

func goBuild(dir, out, pkg string) error {
	args := []string{"build", "-o", out, pkg}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, output)
	}
	return nil
}

// peerBinariesFor returns the built peers, failing t if they did not build.
// Under -short nothing is built, and a test asking for them fails.
func peerBinariesFor(t *testing.T) peers {
	t.Helper()
	if testing.Short() {
		t.Fatal("pilot-agent and the app are not built under -short; run interop tests without it")
	}
	if peerBuild.err != nil {
		t.Fatalf("build pilot-agent and the proxyless app: %v", peerBuild.err)
	}
	return peerBuild.peers
}

// process is a started peer whose output is kept for the failure log.
type process struct {
	name   string
	cmd    *exec.Cmd
	logs   *logtest.Buffer
	exited chan struct{}
}

// startProcess starts cmd, collecting its stderr (and stdout unless the
// caller took it). It is stopped with SIGTERM when the test ends, and its
// output logged if the test failed.
func startProcess(t testing.TB, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{name: name, cmd: cmd, logs: &logtest.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.logs
	if cmd.Stdout == nil {
		cmd.Stdout = p.logs
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		stopProcess(t, cmd, p.exited)
		if t.Failed() {
			t.Logf("%s: %s\n--- %s output ---\n%s--- end of %s output ---",
				name, strings.Join(cmd.Args, " "), name, p.logs.String(), name)
		}
	})
	return p
}

// running reports an error if the process has exited.
func (p *process) running() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %s", p.name, p.cmd.ProcessState)
	default:
		return nil
	}
}
