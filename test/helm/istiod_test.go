package helm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// istiodPodName is the pod name istiod is given (POD_NAME), as the
// Deployment's downward API would.
const istiodPodName = "istiod-helm-test"

// istiodBinary is the real istiod, built once per test binary from the
// repository's main module by the first test that runs it.
var istiodBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func buildIstiod(t *testing.T) string {
	t.Helper()
	istiodBinary.once.Do(func() {
		began := time.Now()
		dir, err := os.MkdirTemp("", "bulwark-helm-istiod-")
		if err != nil {
			istiodBinary.err = err
			return
		}
		istiodBinary.dir = dir
		istiodBinary.path = filepath.Join(dir, "istiod")
		// The flags of `make build`, so the build cache is shared with it.
		cmd := exec.Command("go", "build", "-trimpath", "-o", istiodBinary.path, "./cmd/istiod")
		cmd.Dir = filepath.Join(ChartDir(), "..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			istiodBinary.err = fmt.Errorf("go build ./cmd/istiod: %w\n%s", err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "built istiod in %v\n", time.Since(began).Round(time.Millisecond))
	})
	if istiodBinary.err != nil {
		t.Fatal(istiodBinary.err)
	}
	return istiodBinary.path
}

// removeIstiodBinary is called by TestMain after the tests.
func removeIstiodBinary() {
	if istiodBinary.dir != "" {
		_ = os.RemoveAll(istiodBinary.dir)
	}
}

// istiodProcess is istiod running out of cluster as the chart's Deployment
// would run it.
type istiodProcess struct {
	cmd      *exec.Cmd
	logPath  string
	httpAddr string
	// WebhookAddr serves /inject and /validate (the chart's 15017).
	webhookAddr string
	done        chan struct{}
	waitErr     error
	stopOnce    sync.Once
}

// addrFlags are the container's listen addresses and paths that a process
// on the test machine replaces.
var addrFlags = map[string]bool{
	"secureGRPCAddr": true, "httpAddr": true, "httpsAddr": true, "monitoringAddr": true,
	"state-dir": true, "cacerts-dir": true, "grpcAddr": true,
}

// startIstiod runs istiod with the arguments and literal environment of
// the chart's Deployment, except that it listens on free loopback ports,
// keeps its state in temporary directories, reads the injector config from
// injectDir, serves the webhooks on webhookAddr, and reaches the apiserver
// through kubeconfig.
func startIstiod(t *testing.T, dep *appsv1.Deployment, kubeconfig, injectDir, webhookAddr string) *istiodProcess {
	t.Helper()
	bin := buildIstiod(t)
	container := dep.Spec.Template.Spec.Containers[0]
	p := &istiodProcess{
		logPath:     filepath.Join(t.TempDir(), "istiod.log"),
		httpAddr:    freeAddr(t),
		webhookAddr: webhookAddr,
		done:        make(chan struct{}),
	}
	var args []string
	for _, a := range container.Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "--") && addrFlags[name] {
			continue
		}
		args = append(args, a)
	}
	if len(args) == 0 || args[0] != "discovery" {
		t.Fatalf("the Deployment's args %q do not start with discovery", container.Args)
	}
	args = append(args,
		"--secureGRPCAddr="+freeAddr(t),
		"--httpAddr="+p.httpAddr,
		"--httpsAddr="+p.webhookAddr,
		"--monitoringAddr="+freeAddr(t),
		"--state-dir="+t.TempDir(),
		"--cacerts-dir="+t.TempDir(), // empty: the self-signed CA in istio-ca-secret
		"--inject-config-dir="+injectDir,
		"--kubeconfig="+kubeconfig,
	)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for _, e := range container.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+istiodPodName)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+dep.Namespace)
		case e.ValueFrom != nil:
			t.Fatalf("env %s: the test does not know how to resolve %+v", e.Name, e.ValueFrom)
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start istiod: %v", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Logf("istiod %s", strings.Join(args, " "))
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("istiod log:\n%s", p.logTail(60))
			if lines := p.forbiddenLines(10); len(lines) > 0 {
				t.Logf("the apiserver refused istiod:\n%s", strings.Join(lines, "\n"))
			}
		}
	})
	return p
}

// stop sends SIGTERM, as the kubelet does, and waits for istiod to exit.
func (p *istiodProcess) stop(t *testing.T) {
	t.Helper()
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			var exit *exec.ExitError
			if p.waitErr != nil && !errors.As(p.waitErr, &exit) {
				t.Errorf("istiod: %v", p.waitErr)
			} else if p.waitErr != nil {
				t.Errorf("istiod exited with %v after SIGTERM", p.waitErr)
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("istiod did not exit 30s after SIGTERM")
		}
	})
}

func (p *istiodProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *istiodProcess) ready() (bool, string) {
	if p.exited() {
		return false, "istiod exited: " + p.logTail(20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+"/ready", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status
}

func (p *istiodProcess) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *istiodProcess) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var forbidden = regexp.MustCompile(`(?i)forbidden`)

// forbiddenLines returns the log lines in which the apiserver refused
// istiod, with up to max of them.
func (p *istiodProcess) forbiddenLines(max int) []string {
	var out []string
	for _, line := range strings.Split(p.log(), "\n") {
		if forbidden.MatchString(line) {
			out = append(out, line)
			if len(out) == max {
				break
			}
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
