package interop

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// Every time of the rotation is shortened so that the test takes well
// under two minutes: certificates live 30 s (renewed at half life), the
// new root is trusted for 3 s before its key signs, istiod moves the
// rotation every 200 ms.
const (
	rotationSecretTTL = 30 * time.Second
	rotationGrace     = 3 * time.Second
	rotationTick      = 200 * time.Millisecond
	callEvery         = 50 * time.Millisecond
)

// TestRootRotationWithRealAgents rotates istiod's self-signed root while
// two proxyless gRPC apps, each behind the unmodified pilot-agent (with
// PROXY_CONFIG_XDS_AGENT=true, as the injector sets it), call each other
// over mTLS every 50 ms, each call on a new connection and so a new TLS
// handshake. `istiod ca rotate` starts it; while the client's agent is
// stopped (SIGSTOP: connected, but never ACKing the new bundle) the
// rotation stays in prepare and names it; once the agent runs again the
// new key signs, and once what the old key signed has expired the old
// root leaves every ConfigMap. No call fails.
//
// The apps read their certificate files every second instead of the 15
// minutes of pilot-agent's gRPC bootstrap: the grace an operator gives a
// rotation must exceed that interval (README, "Rotating the root").
//
// The same runs for a plugged-in CA whose cacerts set is replaced by one
// with another root, without the stopped agent.
//
// Not parallel, as TestPilotAgentProxylessGRPC: istiod writes its root
// into every namespace.
func TestRootRotationWithRealAgents(t *testing.T) {
	t.Run("self-signed, istiod ca rotate", func(t *testing.T) { testRootRotation(t, false) })
	t.Run("plugged-in, a cacerts set with another root", func(t *testing.T) { testRootRotation(t, true) })
}

func testRootRotation(t *testing.T, pluggedIn bool) {
	bins := peerBinariesFor(t)
	env := testenv.Get(t)
	istiodNS, ns := env.Namespace(t), env.Namespace(t)
	m := meshModel{
		Namespace: ns,
		Server: workload{Name: "echo-1", Namespace: ns, ServiceAccount: "echo", IP: "127.0.0.2",
			Labels: map[string]string{"app": "echo", "security.istio.io/tlsMode": "istio"}},
		Client: workload{Name: "client-1", Namespace: ns, ServiceAccount: "client", IP: "127.0.0.3",
			Labels: map[string]string{"app": "client", "security.istio.io/tlsMode": "istio"}},
	}
	m.ServerPort = freePortOn(t, m.Server.IP)
	modelFlags, _ := writeModel(t, env, m)
	cacerts := filepath.Join(t.TempDir(), "cacerts")
	if pluggedIn {
		writeCACerts(t, cacerts)
	}
	p := startIstiod(t, append([]string{"--kubeconfig", env.Kubeconfig, "--namespace", istiodNS,
		"--cacerts-dir", cacerts,
		"--inject-config-dir", filepath.Join(t.TempDir(), "inject"),
		"--serving-dns-names", caSAN,
		"--root-rotation-tick", rotationTick.String(),
		"--root-rotation-grace", rotationGrace.String(),
		"--root-grace-percentile", "-1"}, modelFlags...)...)
	rootFile := publishedRoot(t, env, ns)
	oldRoot := parseCerts(t, mustRead(t, rootFile))[0]
	_, port, err := net.SplitHostPort(p.SecureGRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]*pilotAgent{}
	for _, w := range []workload{m.Server, m.Client} {
		token := env.ServiceAccountToken(t, w.Namespace, w.ServiceAccount, []string{"istio-ca"}, nil)
		agents[w.Name] = startPilotAgent(t, bins.pilotAgent, w, token, rootFile, "localhost:"+port,
			"SECRET_TTL="+rotationSecretTTL.String())
	}
	for _, a := range agents {
		a.waitReady(t, agentTimeout)
		a.Bootstrap = fastCertRefresh(t, a.Bootstrap)
	}
	srv := startApp(t, bins.app, agents[m.Server.Name],
		"-serve", net.JoinHostPort(m.Server.IP, fmt.Sprint(m.ServerPort)), "-name", m.Server.Name)
	srv.waitLine(t, "mode SERVING", agentTimeout)
	cli := startApp(t, bins.app, agents[m.Client.Name],
		"-target", fmt.Sprintf("xds:///echo.%s.svc.cluster.local:%d", ns, echoPort))
	want := okFrom(m.Server, m.Client)
	if got := cli.callUntil(t, want, agentTimeout); got != want {
		t.Fatalf("first call: %q, want %q", got, want)
	}
	waitSynced(t, p.MonitoringAddr, m.Server, m.Client)

	calls := startCalling(t, cli, want)

	began := time.Now()
	var r *ca.Rotation
	if pluggedIn {
		writeCACerts(t, cacerts)
		r = waitRotation(t, env, istiodNS, "the new root in the bundle", func(r *ca.Rotation) bool { return r.InProgress() })
	} else {
		r = rotateWithAStoppedAgent(t, env, p, istiodNS, agents[m.Client.Name], m.Client)
	}
	newRoot, err := x509.ParseCertificate(r.NewRoot)
	if err != nil {
		t.Fatal(err)
	}
	r = waitRotation(t, env, istiodNS, "activation", func(r *ca.Rotation) bool { return r.Phase == ca.PhaseActivate })
	t.Logf("rotation began → new key signs: %v", time.Since(began).Round(time.Millisecond))
	activated := time.Now()
	waitRotation(t, env, istiodNS, "the old root's retirement", func(r *ca.Rotation) bool { return !r.InProgress() })
	t.Logf("activation → old root retired: %v (old key's last certificate valid until %s)", time.Since(activated).Round(time.Millisecond), r.OldSignedUntil.Format(time.RFC3339))

	t.Run("the old root is gone from the namespace's ConfigMap", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			cm, err := env.Client(t).CoreV1().ConfigMaps(ns).Get(context.Background(), "istio-ca-root-cert", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			roots := parseCerts(t, []byte(cm.Data["root-cert.pem"]))
			if len(roots) == 1 && roots[0].Equal(newRoot) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("istio-ca-root-cert holds %d roots, want the new one only", len(roots))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// The agents renew at half life: within it their files chain to the
	// new root alone, and calls keep succeeding throughout.
	t.Run("each agent's certificate chains to the new root only", func(t *testing.T) {
		for _, a := range agents {
			waitChainsTo(t, a, newRoot, oldRoot, rotationSecretTTL)
		}
	})

	ok, failed := calls.stop()
	t.Logf("%d calls over new connections every %v during the rotation, %d failed", ok+len(failed), callEvery, len(failed))
	if ok == 0 || len(failed) > 0 {
		t.Errorf("%d calls failed during the rotation (%d succeeded); first: %v", len(failed), ok, failed[:min(len(failed), 5)])
	}
}

// rotateWithAStoppedAgent stops the agent (SIGSTOP: it holds its
// connection but never ACKs the new bundle), runs `istiod ca rotate`,
// checks that the rotation stays in prepare naming the agent's proxy past
// the grace, and lets the agent run again. It returns the rotation begun.
func rotateWithAStoppedAgent(t *testing.T, env *testenv.Env, p *istiod, istiodNS string, a *pilotAgent, w workload) *ca.Rotation {
	t.Helper()
	proc := a.proc.cmd.Process
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = proc.Signal(syscall.SIGCONT)
		}
	}()
	out := runIstiodCommand(t, p, "ca", "rotate", "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS)
	if !strings.Contains(out, "phase: prepare") {
		t.Fatalf("istiod ca rotate:\n%s", out)
	}
	r := waitRotation(t, env, istiodNS, "the new root in the bundle", func(r *ca.Rotation) bool {
		return r.Phase == ca.PhasePrepare && len(r.Replicas) > 0
	})
	t.Run("a proxy that does not ACK the new bundle holds the rotation in prepare, named", func(t *testing.T) {
		time.Sleep(rotationGrace + time.Second)
		r := loadRotation(t, env, istiodNS)
		if r.Phase != ca.PhasePrepare {
			t.Fatalf("phase %s with the client's agent stopped", r.Phase)
		}
		if got := r.DataPlane(time.Time{}).Unacked; len(got) != 1 || got[0] != w.Name+"."+w.Namespace {
			t.Errorf("the rotation waits for %v, want %s.%s", got, w.Name, w.Namespace)
		}
		statuses, err := getSyncz(p.MonitoringAddr)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range statuses {
			isClient := strings.Contains(s.NodeID, w.Name+"."+w.Namespace)
			if s.LacksNewRoot != isClient {
				t.Errorf("/debug/syncz: %s lacksNewRoot=%v", s.NodeID, s.LacksNewRoot)
			}
		}
		if v := metric(t, p.MonitoringAddr, "bulwark_ca_root_rotation_unacked_proxies"); v != "1" {
			t.Errorf("bulwark_ca_root_rotation_unacked_proxies = %s, want 1", v)
		}
		if out := runIstiodCommand(t, p, "ca", "status", "--kubeconfig", env.Kubeconfig, "--namespace", istiodNS); !strings.Contains(out, w.Name+"."+w.Namespace) {
			t.Errorf("istiod ca status does not name the proxy:\n%s", out)
		}
	})
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	return r
}

// writeCACerts writes a new root and an intermediate that signs as
// Istio's cacerts set in dir.
func writeCACerts(t *testing.T, dir string) {
	t.Helper()
	root := catest.NewRoot(t)
	catest.WriteCACerts(t, dir, catest.CACerts{Signing: catest.NewIntermediate(t, root), Roots: []*catest.Cert{root}})
}

// fastCertRefresh writes a copy of the agent's gRPC bootstrap whose
// certificate provider reads the files every second, and returns its path.
func fastCertRefresh(t *testing.T, path string) string {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal(mustRead(t, path), &b); err != nil {
		t.Fatal(err)
	}
	providers, _ := b["certificate_providers"].(map[string]any)
	if len(providers) == 0 {
		t.Fatalf("%s has no certificate providers", path)
	}
	for _, p := range providers {
		cfg, _ := p.(map[string]any)["config"].(map[string]any)
		if cfg == nil {
			t.Fatalf("%s: certificate provider without config", path)
		}
		cfg["refresh_interval"] = "1s"
	}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	fast := filepath.Join(t.TempDir(), "grpc-bootstrap.json")
	if err := os.WriteFile(fast, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return fast
}

// caller makes a call on a new connection every callEvery until stopped.
type caller struct {
	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	ok     int
	failed []string
}

func startCalling(t *testing.T, cli *app, want string) *caller {
	c := &caller{done: make(chan struct{})}
	c.wg.Go(func() {
		tick := time.NewTicker(callEvery)
		defer tick.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-tick.C:
			}
			if _, err := io.WriteString(cli.stdin, "dial\n"); err != nil {
				c.record(time.Now(), "write: "+err.Error(), want)
				return
			}
			select {
			case l, ok := <-cli.lines:
				if !ok {
					c.record(time.Now(), "the app exited", want)
					return
				}
				c.record(time.Now(), l, want)
			case <-time.After(10 * time.Second):
				c.record(time.Now(), "no answer", want)
				return
			}
		}
	})
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *caller) record(at time.Time, result, want string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if result == want {
		c.ok++
		return
	}
	c.failed = append(c.failed, at.Format("15:04:05.000")+" "+result)
}

func (c *caller) stop() (ok int, failed []string) {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, c.failed
}

// runIstiodCommand runs istiod's binary with args and returns its output.
func runIstiodCommand(t *testing.T, p *istiod, args ...string) string {
	t.Helper()
	cmd := exec.Command(p.bin, args...)
	cmd.Env = isolatedEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("istiod %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func loadRotation(t *testing.T, env *testenv.Env, ns string) *ca.Rotation {
	t.Helper()
	r, _, err := secretstore.NewRotationStore(env.Client(t).CoreV1(), ns).Load(context.Background())
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return r
}

// waitRotation polls the istio-ca-rotation Secret until cond holds.
func waitRotation(t *testing.T, env *testenv.Env, ns, what string, cond func(*ca.Rotation) bool) *ca.Rotation {
	t.Helper()
	deadline := time.Now().Add(rotationSecretTTL + 30*time.Second)
	for {
		r := loadRotation(t, env, ns)
		if r != nil && cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; rotation state: %+v", what, r)
		}
		time.Sleep(rotationTick)
	}
}

// waitChainsTo waits until the agent's certificate chains to root and not
// to old, and its root file holds root alone.
func waitChainsTo(t *testing.T, a *pilotAgent, root, old *x509.Certificate, within time.Duration) {
	t.Helper()
	pool := func(c *x509.Certificate) *x509.CertPool { p := x509.NewCertPool(); p.AddCert(c); return p }
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		chain, err := os.ReadFile(filepath.Join(a.CertDir, "cert-chain.pem"))
		if err != nil {
			last = err.Error()
			continue
		}
		roots, err := os.ReadFile(filepath.Join(a.CertDir, "root-cert.pem"))
		if err != nil {
			last = err.Error()
			continue
		}
		certs := parseCerts(t, chain)
		intermediates := x509.NewCertPool()
		for _, c := range certs[1:] {
			intermediates.AddCert(c)
		}
		opts := func(r *x509.CertPool) x509.VerifyOptions {
			return x509.VerifyOptions{Roots: r, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
		}
		_, errNew := certs[0].Verify(opts(pool(root)))
		_, errOld := certs[0].Verify(opts(pool(old)))
		held := parseCerts(t, roots)
		if errNew == nil && errOld != nil && len(held) == 1 && bytes.Equal(held[0].Raw, root.Raw) {
			return
		}
		last = fmt.Sprintf("chains to the new root: %v; to the old: %v; root-cert.pem holds %d roots", errNew == nil, errOld == nil, len(held))
	}
	t.Errorf("%s: %s", a.Workload.Name, last)
}

// metric returns the value of an unlabelled metric on /metrics.
func metric(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
