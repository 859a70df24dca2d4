package interop

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// workload is one pod's worth of identity for a pilot-agent: what the
// injector's grpc-agent template would put in the pod's environment.
type workload struct {
	Name           string // POD_NAME
	Namespace      string // POD_NAMESPACE
	ServiceAccount string
	IP             string // INSTANCE_IP: a loopback address of its own
	Labels         map[string]string
}

// SPIFFEID is the identity istiod must issue for the workload.
func (w workload) SPIFFEID() string {
	return "spiffe://" + trustDomain + "/ns/" + w.Namespace + "/sa/" + w.ServiceAccount
}

// pilotAgent is one `pilot-agent proxy sidecar` in proxyless mode, run in a
// working directory of its own that stands in for the container's root:
// pilot-agent reads and writes ./var/run/secrets/..., ./etc/istio/....
type pilotAgent struct {
	Workload   workload
	Dir        string // working directory
	CertDir    string // OUTPUT_CERTS
	Bootstrap  string // GRPC_XDS_BOOTSTRAP
	StatusPort int
	proc       *process
}

// startPilotAgent writes the token pilot-agent reads, and runs it against
// istiod at discoveryAddr (host:port) trusting rootFile. discoveryAddr is
// both the xDS upstream and CA_ADDR. env is added to its environment.
func startPilotAgent(t *testing.T, bin string, w workload, token, rootFile, discoveryAddr string, env ...string) *pilotAgent {
	t.Helper()
	dir := t.TempDir()
	a := &pilotAgent{
		Workload:   w,
		Dir:        dir,
		CertDir:    filepath.Join(dir, "etc", "certs"),
		Bootstrap:  filepath.Join(dir, "etc", "istio", "proxy", "grpc-bootstrap.json"),
		StatusPort: freePort(t),
	}
	// The projected token volume of the pod; pilot-agent's path is relative.
	tokenFile := filepath.Join(dir, "var", "run", "secrets", "tokens", "istio-token")
	for _, d := range []string{filepath.Dir(tokenFile), a.CertDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	proxyConfig, err := json.Marshal(map[string]any{
		"discoveryAddress": discoveryAddr,
		// Absolute, so the xDS socket path in the gRPC bootstrap is one
		// the app (in another directory) can dial.
		"configPath": filepath.Join(dir, "etc", "istio", "proxy"),
		"statusPort": a.StatusPort,
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "proxy", "sidecar", "--domain", w.Namespace+".svc.cluster.local")
	cmd.Dir = dir
	cmd.Env = append(agentEnv(t, w, discoveryAddr, rootFile, proxyConfig),
		"DISABLE_ENVOY=true",
		"OUTPUT_CERTS="+a.CertDir,
		"GRPC_XDS_BOOTSTRAP="+a.Bootstrap,
	)
	cmd.Env = append(cmd.Env, env...)
	a.proc = startProcess(t, "pilot-agent "+w.Name, cmd)
	return a
}

// waitReady waits until the status port's readiness probe passes: for a
// proxyless agent, the gRPC bootstrap is written and every certificate file
// it names exists, so the CSR to istiod succeeded.
func (a *pilotAgent) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", a.StatusPort)
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if err := a.proc.running(); err != nil {
			t.Fatalf("pilot-agent %s: %v", a.Workload.Name, err)
		}
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pilot-agent %s not ready after %v: %s", a.Workload.Name, timeout, last)
}

// app is the proxyless gRPC app of test/xds run with a pilot-agent's
// bootstrap; its stdout lines are the results it reports.
type app struct {
	proc  *process
	stdin io.WriteCloser
	lines chan string
}

// startApp runs the app with args under agent's gRPC bootstrap.
func startApp(t *testing.T, bin string, agent *pilotAgent, args ...string) *app {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(isolatedEnv(), "GRPC_XDS_BOOTSTRAP="+agent.Bootstrap)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A pipe of our own rather than StdoutPipe, which Wait closes
	// whether or not its lines were read.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	a := &app{stdin: stdin, lines: make(chan string, 100)}
	a.proc = startProcess(t, "app "+agent.Workload.Name, cmd)
	w.Close()
	t.Cleanup(func() { stdin.Close() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			a.proc.logs.Write([]byte("stdout: " + sc.Text() + "\n"))
			a.lines <- sc.Text()
		}
		close(a.lines)
		stdout.Close()
	}()
	return a
}

// waitLine waits for an output line starting with prefix.
func (a *app) waitLine(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				t.Fatalf("%s exited waiting for %q", a.proc.name, prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("%s: no %q line within %v", a.proc.name, prefix, timeout)
		}
	}
}

// callUntil makes one RPC at a time until the result is want, and returns
// the last result.
func (a *app) callUntil(t *testing.T, want string, timeout time.Duration) string {
	t.Helper()
	last, _ := a.callUntilMatch(t, func(l string) bool { return l == want }, timeout)
	return last
}

// callUntilCode makes one RPC at a time until one fails with code, and
// returns the last result and whether it did.
func (a *app) callUntilCode(t *testing.T, code codes.Code, timeout time.Duration) (string, bool) {
	t.Helper()
	prefix := "err " + code.String() + " "
	return a.callUntilMatch(t, func(l string) bool { return strings.HasPrefix(l, prefix) }, timeout)
}

// callUntilMatch makes one RPC at a time until a result matches, and
// returns the last result and whether it matched.
func (a *app) callUntilMatch(t *testing.T, match func(result string) bool, timeout time.Duration) (string, bool) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := io.WriteString(a.stdin, "call\n"); err != nil {
			t.Fatalf("%s: write: %v", a.proc.name, err)
		}
		select {
		case l, ok := <-a.lines:
			if !ok {
				t.Fatalf("%s exited", a.proc.name)
			}
			if last = l; match(l) {
				return l, true
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not answer", a.proc.name)
		}
	}
	return last, false
}

// freePort returns a port free on every interface a moment ago: the
// pilot-agent status server listens on all of them.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freePortOn returns a port free on ip, an address of this machine.
func freePortOn(t *testing.T, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("find a free port on %s: %v", ip, err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// agentEnv is the environment the injector gives pilot-agent, for workload
// w, both modes alike.
func agentEnv(t *testing.T, w workload, discoveryAddr, rootFile string, proxyConfig []byte) []string {
	t.Helper()
	labels, err := json.Marshal(w.Labels)
	if err != nil {
		t.Fatal(err)
	}
	return append(isolatedEnv(),
		"CA_ADDR="+discoveryAddr,
		"XDS_ROOT_CA="+rootFile,
		"CA_ROOT_CA="+rootFile,
		"PROXY_CONFIG="+string(proxyConfig),
		"POD_NAME="+w.Name,
		"POD_NAMESPACE="+w.Namespace,
		"INSTANCE_IP="+w.IP,
		"SERVICE_ACCOUNT="+w.ServiceAccount,
		"ISTIO_META_CLUSTER_ID="+clusterID,
		"ISTIO_METAJSON_LABELS="+string(labels),
		"TRUST_DOMAIN="+trustDomain,
		// The agent asks istiod for the trust bundle (PCDS) and serves its
		// roots as ROOTCA.
		"PROXY_CONFIG_XDS_AGENT=true",
		// No cloud metadata servers to probe for five seconds.
		"CLOUD_PLATFORM=none",
	)
}
