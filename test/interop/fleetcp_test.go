package interop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
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

	"github.com/bulwark-mesh/bulwark/internal/proccpu"
	"github.com/bulwark-mesh/bulwark/internal/testenv"
)

// The two control planes of BenchmarkFleetVsIstio, each a process of its
// own in Kubernetes mode on the test apiserver, serving plaintext xDS (the
// 15010 of both) on a free loopback port.

const (
	fleetIstio   = "istio"
	fleetBulwark = "bulwark"

	fleetReadyTimeout = 3 * time.Minute
	fleetStopTimeout  = 30 * time.Second
)

// lazyBinary is a peer built on first use by a benchmark: make bench runs
// them under -short, when TestMain builds nothing, and a cold build takes
// minutes.
type lazyBinary struct {
	once sync.Once
	path string
	took time.Duration
	err  error
}

// get builds pkg of the module in dir as name under peerCacheDir, once.
func (l *lazyBinary) get(t testing.TB, dir, name, pkg string) string {
	t.Helper()
	l.once.Do(func() {
		start := time.Now()
		l.path = filepath.Join(peerCacheDir(), name)
		l.err = goBuild(dir, l.path, pkg)
		l.took = time.Since(start)
	})
	if l.err != nil {
		t.Fatalf("build %s: %v", name, l.err)
	}
	fleetNote("go build of %s took %s (an up-to-date binary is left alone)", name, l.took.Round(time.Second))
	return l.path
}

// pilotDiscoveryBuild is Istio's pilot-discovery, which no test needs.
var pilotDiscoveryBuild lazyBinary

func pilotDiscoveryBinary(b *testing.B) string {
	b.Helper()
	return pilotDiscoveryBuild.get(b, ".", "pilot-discovery", "istio.io/istio/pilot/cmd/pilot-discovery")
}

// fleetCP is a running control plane.
type fleetCP struct {
	kind       string
	xds        string // plaintext xDS
	http       string // /ready
	monitoring string // /debug/pprof/
	cmd        *exec.Cmd
	exited     chan struct{}
	log        string
}

func (c *fleetCP) pid() int { return c.cmd.Process.Pid }

// fleetMeshConfig writes the mesh configuration both control planes read:
// the mesh's root namespace is theirs.
func fleetMeshConfig(b *testing.B, root string) (meshFile, networksFile string) {
	dir := b.TempDir()
	meshFile, networksFile = filepath.Join(dir, "mesh"), filepath.Join(dir, "meshNetworks")
	mesh := fmt.Sprintf("rootNamespace: %s\ntrustDomain: %s\ndefaultConfig:\n  discoveryAddress: istiod.%s.svc:15012\n",
		root, trustDomain, root)
	if err := os.WriteFile(meshFile, []byte(mesh), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(networksFile, []byte("networks: {}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return meshFile, networksFile
}

// startFleetCP starts the control plane of the given kind for a round and
// waits until it is ready; it is stopped when b ends, if not before.
// extraEnv is added to its environment.
func startFleetCP(b *testing.B, kind, bin string, env *testenv.Env, root, meshFile, networksFile string, round int, extraEnv ...string) *fleetCP {
	b.Helper()
	dir := b.TempDir()
	addrs := freeAddrs(b, 6)
	c := &fleetCP{kind: kind, xds: addrs[0], http: addrs[1], monitoring: addrs[2], log: filepath.Join(dir, kind+".log"),
		exited: make(chan struct{})}
	var args []string
	env2 := isolatedEnv()
	switch kind {
	case fleetIstio:
		_, ctrlzPort, _ := strings.Cut(addrs[3], ":")
		args = []string{"discovery", "--kubeconfig", env.Kubeconfig, "--meshConfig", meshFile,
			"--networksConfig", networksFile, "--registries", "Kubernetes", "--clusterID", "Kubernetes",
			"--namespace", root, "--grpcAddr", c.xds, "--httpAddr", c.http, "--monitoringAddr", c.monitoring,
			// No TLS servers: with no CA and no certificate files, istiod
			// has no serving certificate; the webhooks share --httpAddr.
			"--secureGRPCAddr=", "--httpsAddr=",
			"--ctrlz_port", ctrlzPort, "--ctrlz_address", "127.0.0.1"}
		env2 = append(env2, "POD_NAMESPACE="+root, fmt.Sprintf("POD_NAME=istiod-fleet-%d", round),
			// Its CA is not under test, and the webhooks' configurations
			// it would patch do not exist; nor do the Gateway API CRDs.
			"ENABLE_CA_SERVER=false", "INJECTION_WEBHOOK_CONFIG_NAME=", "VALIDATION_WEBHOOK_CONFIG_NAME=",
			"INJECT_ENABLED=false", "PILOT_ENABLE_GATEWAY_API=false")
	case fleetBulwark:
		args = []string{"discovery", "--kubeconfig", env.Kubeconfig, "--namespace", root, "--meshConfig", meshFile,
			"--state-dir", filepath.Join(dir, "state"), "--trust-domain", trustDomain,
			"--cacerts-dir", filepath.Join(dir, "cacerts"), "--inject-config-dir", filepath.Join(dir, "inject"),
			"--grpcAddr", c.xds, "--httpAddr", c.http, "--monitoringAddr", c.monitoring,
			"--secureGRPCAddr", addrs[4], "--httpsAddr", addrs[5]}
	default:
		b.Fatalf("unknown control plane %q", kind)
	}
	env2 = append(env2, extraEnv...)
	logFile, err := os.Create(c.log)
	if err != nil {
		b.Fatal(err)
	}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Dir, c.cmd.Env, c.cmd.Stdout, c.cmd.Stderr = dir, env2, logFile, logFile
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		b.Fatalf("start %s: %v", kind, err)
	}
	go func() {
		_ = c.cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	b.Cleanup(func() {
		c.stop(b)
		if b.Failed() {
			b.Logf("%s %s\n--- last lines of its output ---\n%s", kind, strings.Join(args, " "), tailFile(c.log, 60))
		}
	})
	if err := c.waitReady(); err != nil {
		b.Fatalf("%s not ready: %v\n%s", kind, err, tailFile(c.log, 60))
	}
	return c
}

func (c *fleetCP) waitReady() error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(fleetReadyTimeout)
	last := errors.New("no answer yet")
	for time.Now().Before(deadline) {
		select {
		case <-c.exited:
			return fmt.Errorf("exited: %s", c.cmd.ProcessState)
		default:
		}
		resp, err := client.Get("http://" + c.http + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/ready: %s", resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("after %s: %w", fleetReadyTimeout, last)
}

// stop sends SIGTERM, and SIGKILL if the process outlives fleetStopTimeout.
func (c *fleetCP) stop(b *testing.B) {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(fleetStopTimeout):
		fleetNote("%s did not exit %s after SIGTERM; killing it", c.kind, fleetStopTimeout)
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

func (c *fleetCP) cpu(b *testing.B) time.Duration {
	d, err := proccpu.Of(c.pid())
	if err != nil {
		b.Fatalf("%s: %v", c.kind, err)
	}
	return d
}

// Quiet is less than fleetQuietCPU of CPU over fleetQuietWindow.
const (
	fleetQuietWindow  = time.Second
	fleetQuietCPU     = 30 * time.Millisecond
	fleetQuietTimeout = time.Minute
)

// waitQuiet waits until the control plane's CPU is quiet and returns its
// CPU time at the start of the quiet window: what the work before it cost.
func (c *fleetCP) waitQuiet(b *testing.B) time.Duration {
	type sample struct {
		at  time.Time
		cpu time.Duration
	}
	step := fleetQuietWindow / 4
	samples := []sample{{time.Now(), c.cpu(b)}}
	deadline := time.Now().Add(fleetQuietTimeout)
	for {
		time.Sleep(step)
		now := sample{time.Now(), c.cpu(b)}
		samples = append(samples, now)
		for len(samples) > 1 && now.at.Sub(samples[1].at) >= fleetQuietWindow {
			samples = samples[1:]
		}
		first := samples[0]
		if now.at.Sub(first.at) >= fleetQuietWindow && now.cpu-first.cpu <= fleetQuietCPU {
			return first.cpu
		}
		if now.at.After(deadline) {
			fleetNote("%s: CPU not quiet after %s (%s in the last %s)", c.kind, fleetQuietTimeout,
				now.cpu-first.cpu, now.at.Sub(first.at).Round(time.Millisecond))
			return now.cpu
		}
	}
}

// memory is the control plane's live heap after a garbage collection it
// is asked to run (the heap profile with gc=1), and its resident set.
func (c *fleetCP) memory(b *testing.B) (heap, rss int64) {
	resp, err := http.Get("http://" + c.monitoring + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		b.Fatalf("%s heap profile: %v", c.kind, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s heap profile: %s", c.kind, resp.Status)
	}
	heap = -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			heap, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if heap < 0 {
		b.Fatalf("%s heap profile has no HeapAlloc", c.kind)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid()))
	if err != nil {
		b.Fatal(err)
	}
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	return heap, rss
}

// fleetProfileSeconds is how long a change's CPU profile runs.
const fleetProfileSeconds = 5

// profile starts, when $FLEET_PROFILE names a directory, a CPU profile of
// the control plane for fleetProfileSeconds, written there as name.pprof;
// the function it returns waits for it. Only Bulwark's istiod serves
// profiles on its monitoring port.
func (c *fleetCP) profile(b *testing.B, name string) (wait func()) {
	dir := os.Getenv("FLEET_PROFILE")
	if dir == "" || c.kind != fleetBulwark {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.monitoring, fleetProfileSeconds))
		if err != nil {
			fleetNote("%s: profile %s: %v", c.kind, name, err)
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode == http.StatusOK {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), data, 0o644)
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			fleetNote("%s: profile %s: %v %s", c.kind, name, err, resp.Status)
		}
	}()
	time.Sleep(50 * time.Millisecond) // the profile has begun before the change is written
	return func() { <-done }
}

// heapProfile writes, when $FLEET_PROFILE names a directory, the control
// plane's heap profile after a garbage collection there as name.pprof, so
// that two of them can be compared (go tool pprof -base).
func (c *fleetCP) heapProfile(b *testing.B, name string) {
	dir := os.Getenv("FLEET_PROFILE")
	if dir == "" || c.kind != fleetBulwark {
		return
	}
	resp, err := http.Get("http://" + c.monitoring + "/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatalf("%s heap profile: %v", c.kind, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".pprof"), data, 0o644)
	}
	if err != nil {
		b.Fatalf("%s heap profile %s: %v", c.kind, name, err)
	}
}

// tailFile is the last n lines of a file.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
