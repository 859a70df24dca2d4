package interop

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// trustDomain is the trust domain every istiod in these tests runs with.
const trustDomain = "cluster.local"

const (
	readyTimeout = 60 * time.Second
	stopTimeout  = 10 * time.Second
)

// repoRoot is the root module, which holds cmd/istiod.
var repoRoot = func() string {
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return dir
}()

// istiodBuild is the binary TestMain builds for every test of this package.
var istiodBuild struct {
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(istioCAServerEnv); dir != "" {
		os.Exit(runIstioCAServer(dir)) // this process is a benchmark's Istio CA server
	}
	flag.Parse()
	if !testing.Short() {
		// Built before m.Run starts the -timeout clock: a cold -race build
		// of istiod takes minutes on a busy two-core machine, and so does a
		// cold build of pilot-agent.
		var wg sync.WaitGroup
		wg.Go(func() { peerBuild.peers, peerBuild.err = buildPeers() })
		istiodBuild.dir, istiodBuild.path, istiodBuild.err = buildIstiod()
		wg.Wait()
	}
	// testenv.Run runs the tests and stops the kube-apiserver the
	// Kubernetes-mode tests start on first use.
	code := testenv.Run(m)
	printBenchNotes()
	if istiodBuild.dir != "" {
		os.RemoveAll(istiodBuild.dir)
	}
	os.Exit(code)
}

// buildIstiod builds cmd/istiod from the root module into a new temporary
// directory. Under -race the product is built with -race too, so a data race
// that Istio's clients provoke fails the test that provoked it.
func buildIstiod() (dir, path string, err error) {
	dir, err = os.MkdirTemp("", "bulwark-interop-")
	if err != nil {
		return "", "", fmt.Errorf("build istiod: %w", err)
	}
	path = filepath.Join(dir, "istiod")
	args := []string{"build", "-o", path}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/bulwark-mesh/bulwark/cmd/istiod")
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return dir, path, nil
}

// istiodBinary returns the path of the istiod TestMain built. Under -short
// nothing is built (make bench runs the benchmarks that way), so a test
// that needs a process fails rather than passing untested, unless
// $ISTIOD_BIN names a built istiod (make bench's bin/istiod).
func istiodBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		if bin := os.Getenv("ISTIOD_BIN"); bin != "" {
			return bin
		}
		t.Fatal("istiod is not built under -short; run interop tests without it, or set ISTIOD_BIN")
	}
	if istiodBuild.err != nil {
		t.Fatalf("build istiod: %v", istiodBuild.err)
	}
	return istiodBuild.path
}

// istiod is one running `istiod discovery` process in local mode.
type istiod struct {
	StateDir       string
	SecureGRPCAddr string // CSR API and xDS over TLS (15012)
	HTTPAddr       string // /ready (8080)
	MonitoringAddr string // /metrics (15014)
	HTTPSAddr      string // admission webhooks (15017)

	bin  string
	logs *logtest.Buffer
	cmd  *exec.Cmd
}

// Pid is the process id of istiod.
func (p *istiod) Pid() int { return p.cmd.Process.Pid }

// startIstiod runs `istiod discovery` on free loopback ports with a fresh
// state directory and the given extra flags, and waits until /ready answers
// 200. The process is stopped when the test ends; its output is logged if
// the test failed.
func startIstiod(t testing.TB, extraArgs ...string) *istiod {
	t.Helper()
	addrs := freeAddrs(t, 4)
	p := &istiod{
		StateDir:       t.TempDir(),
		SecureGRPCAddr: addrs[0],
		HTTPAddr:       addrs[1],
		MonitoringAddr: addrs[2],
		HTTPSAddr:      addrs[3],
		bin:            istiodBinary(t),
		logs:           &logtest.Buffer{},
	}
	args := append([]string{
		"discovery",
		"--state-dir", p.StateDir,
		"--trust-domain", trustDomain,
		"--secureGRPCAddr", p.SecureGRPCAddr,
		"--httpAddr", p.HTTPAddr,
		"--monitoringAddr", p.MonitoringAddr,
		"--httpsAddr", p.HTTPSAddr,
	}, extraArgs...)
	cmd := exec.Command(p.bin, args...)
	p.cmd = cmd
	cmd.Env = isolatedEnv()
	cmd.Stdout = p.logs
	cmd.Stderr = p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start istiod: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		stopProcess(t, cmd, exited)
		if strings.Contains(p.logs.String(), "WARNING: DATA RACE") {
			t.Errorf("istiod reported a data race")
		}
		if t.Failed() {
			t.Logf("istiod %s\n--- istiod output ---\n%s--- end of istiod output ---", strings.Join(args, " "), p.logs.String())
		}
	})

	if err := p.waitReady(exited); err != nil {
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w: %v", err, waitErr)
		}
		t.Fatalf("istiod not ready: %v", err)
	}
	return p
}

var errExited = errors.New("istiod exited")

func (p *istiod) waitReady(exited <-chan struct{}) error {
	url := "http://" + p.HTTPAddr + "/ready"
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	last := errors.New("no answer yet")
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errExited
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("after %v: %w", readyTimeout, last)
}

// mintedCert is what `istiod mint-cert` writes: Istio's agent file layout.
type mintedCert struct {
	Dir       string
	CertChain string // cert-chain.pem: leaf first, then the chain
	Key       string // key.pem
	Root      string // root-cert.pem: the trust bundle
}

// MintCert issues a client certificate for spiffe://cluster.local/ns/NS/sa/SA
// from this istiod's CA with `istiod mint-cert`.
func (p *istiod) MintCert(t testing.TB, namespace, serviceAccount string) mintedCert {
	t.Helper()
	out := filepath.Join(t.TempDir(), "certs")
	args := []string{
		"mint-cert",
		"--state-dir", p.StateDir,
		"--trust-domain", trustDomain,
		"--namespace", namespace,
		"--service-account", serviceAccount,
		"--out-dir", out,
		"--ttl", "1h",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = isolatedEnv()
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("istiod %s: %v\n%s", strings.Join(args, " "), err, output)
	}
	return mintedCert{
		Dir:       out,
		CertChain: filepath.Join(out, "cert-chain.pem"),
		Key:       filepath.Join(out, "key.pem"),
		Root:      filepath.Join(out, "root-cert.pem"),
	}
}

// stopProcess sends SIGTERM, and SIGKILL if the process outlives stopTimeout.
func stopProcess(t testing.TB, cmd *exec.Cmd, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	default:
	}
	name := filepath.Base(cmd.Path)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Logf("signal %s: %v", name, err)
	}
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		t.Errorf("%s did not exit %v after SIGTERM; killing it", name, stopTimeout)
		cmd.Process.Kill()
		<-exited
	}
}

// isolatedEnv is the test's environment without the variables istiod reads
// to find a cluster, so every process runs in local mode.
func isolatedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
			"POD_NAMESPACE", "CLUSTER_ID", "REVISION", "TRUST_DOMAIN", "JWT_RULE", "TOKEN_AUDIENCES":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago, all different: each is held until every one is found, or the
// system could hand out one port twice.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
