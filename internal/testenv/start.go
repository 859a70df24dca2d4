package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

const (
	etcdTimeout      = 30 * time.Second
	apiserverTimeout = 120 * time.Second // generous: CI machines are shared
	pollInterval     = 50 * time.Millisecond
	startAttempts    = 3 // ports are chosen free, but can be taken before use
	logTailLines     = 40
)

// cluster is what start leaves running; stop undoes it.
type cluster struct {
	runDir    string
	keep      bool
	etcd      *process
	apiserver *process
	// bins, keys and ports are kept so that a private cluster can be
	// started again where it was (restart).
	bins  binaries
	keys  *pki
	ports []int
}

// start launches etcd and kube-apiserver and waits until the apiserver is
// ready. On error nothing is left running.
func start() (*Env, error) {
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	runDir, err := os.MkdirTemp("", "bulwark-testenv-")
	if err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	c := &cluster{runDir: runDir, bins: bins}
	keys, err := newPKI(runDir)
	if err != nil {
		c.stop()
		return nil, err
	}
	c.keys = keys
	var env *Env
	for attempt := 1; ; attempt++ {
		if c.ports, err = freePorts(3); err != nil {
			c.stop()
			return nil, err
		}
		if err = c.resetData(); err == nil {
			env, err = c.launch()
		}
		if err == nil {
			break
		}
		c.stopProcesses()
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			// Keep the logs: a failed start is rare and needs them.
			_ = os.RemoveAll(c.dataDir())
			return nil, fmt.Errorf("%w\n(run directory kept: %s)", err, runDir)
		}
	}
	if err := allowIssuerDiscovery(env); err != nil {
		c.stop()
		return nil, err
	}
	if err := writeKubeconfig(env); err != nil {
		c.stop()
		return nil, err
	}
	env.StartupTime = time.Since(began)
	return env, nil
}

func (c *cluster) dataDir() string { return filepath.Join(c.runDir, "etcd") }

// resetData removes etcd's data and the logs, for a first start.
func (c *cluster) resetData() error {
	for _, p := range []string{c.dataDir(), filepath.Join(c.runDir, "etcd.log"), filepath.Join(c.runDir, "apiserver.log")} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("reset etcd data: %w", err)
		}
	}
	return nil
}

// launch starts both processes on c.ports with the data in the run
// directory, and waits for them. The logs of a relaunch are appended to
// those of the launch before.
func (c *cluster) launch() (*Env, error) {
	etcdURL := "http://" + hostPort(c.ports[0])
	apiURL := "https://" + hostPort(c.ports[2])
	var err error
	c.etcd, err = startProcess("etcd", c.bins.etcd, etcdArgs(c.dataDir(), etcdURL, "http://"+hostPort(c.ports[1])),
		filepath.Join(c.runDir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	// The apiserver retries its storage connection, so both start at once.
	c.apiserver, err = startProcess("kube-apiserver", c.bins.apiserver, apiserverArgs(c.keys, etcdURL, c.ports[2]),
		filepath.Join(c.runDir, "apiserver.log"))
	if err != nil {
		return nil, err
	}

	if err := waitReady(c.etcd, etcdTimeout, etcdURL+"/health", http.DefaultClient, ""); err != nil {
		return nil, err
	}
	env := newEnv(apiURL, c.keys, c)
	if err := waitReady(c.apiserver, apiserverTimeout, apiURL+"/readyz", env.HTTPClient(), c.keys.adminToken); err != nil {
		return nil, err
	}
	return env, nil
}

// etcdArgs configures a throw-away single member: no fsync, small quota,
// quiet logs.
func etcdArgs(dataDir, clientURL, peerURL string) []string {
	return []string{
		"--name=testenv",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=" + strconv.Itoa(256<<20),
		"--log-level=warn",
	}
}

// apiserverArgs lists the apiserver flags; the reasons are in the package
// documentation and in the comments here.
func apiserverArgs(keys *pki, etcdURL string, port int) []string {
	issuer := "https://" + hostPort(port)
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + keys.certFile,
		"--tls-private-key-file=" + keys.keyFile,
		// Static admin token in system:masters; no client certificates.
		"--token-auth-file=" + keys.tokenFile,
		"--authorization-mode=Node,RBAC",
		// The default admission plugins plus NodeRestriction, the Node
		// authorizer's partner, as kubeadm clusters run them.
		"--enable-admission-plugins=NodeRestriction",
		// Anonymous requests are allowed to reach RBAC, which grants them
		// only health, version and (see allowIssuerDiscovery) OIDC discovery.
		"--anonymous-auth=true",
		// ServiceAccount tokens: this apiserver is their OIDC issuer.
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + keys.saPubFile,
		"--service-account-signing-key-file=" + keys.saKeyFile,
		"--api-audiences=" + issuer,
		// Room for 65,534 Services: a benchmark's mesh has thousands.
		"--service-cluster-ip-range=10.0.0.0/16",
		// Sidecar injection tests create privileged init containers.
		"--allow-privileged=true",
		// Fewer bootstrap objects and controllers: starts faster, and tests
		// do not exercise request fairness.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	}
}

// waitReady polls url until it answers 200, the process exits, or the
// timeout passes; errors carry the tail of the process' log.
func waitReady(p *process, timeout time.Duration, url string, client *http.Client, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := "no answer yet"
	for {
		if gone, err := p.exited(); gone {
			if portTaken(p) {
				return fmt.Errorf("%s: %w", p.name, errPortTaken)
			}
			return fmt.Errorf("%s exited before it was ready (%w); log %s:\n%s",
				p.name, err, p.logPath, p.logTail(logTailLines))
		}
		status, err := probe(ctx, client, url, token)
		if err == nil && status == "" {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = status
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last answer from %s: %s); log %s:\n%s",
				p.name, timeout, url, last, p.logPath, p.logTail(logTailLines))
		case <-time.After(pollInterval):
		}
	}
}

// probe returns "" when url answers 200, otherwise the status and body.
func probe(ctx context.Context, client *http.Client, url, token string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode == http.StatusOK {
		return "", nil
	}
	return fmt.Sprintf("%s: %s", resp.Status, body), nil
}

// stopProcesses kills the apiserver, then etcd.
func (c *cluster) stopProcesses() {
	c.apiserver.stop()
	c.etcd.stop()
	c.apiserver, c.etcd = nil, nil
}

// stop kills both processes and removes the run directory unless it is
// kept: after a failed run its logs explain the failure. A kept directory
// loses etcd's data (its write-ahead log alone takes 64 MB), so that the
// logs of many failed runs do not fill the disk.
func (c *cluster) stop() {
	c.stopProcesses()
	if c.keep {
		_ = os.RemoveAll(c.dataDir())
		fmt.Fprintf(os.Stderr, "testenv: kept the logs in %s\n", c.runDir)
		return
	}
	_ = os.RemoveAll(c.runDir)
}
