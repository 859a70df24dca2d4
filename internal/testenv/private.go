package testenv

import (
	"sync"
	"testing"
	"time"
)

// StartPrivate starts an etcd and kube-apiserver for t alone, which t may
// stop and restart (Env.Stop, Env.Restart) to see how a client rides out
// an outage; the shared environment of Get is never stopped by a test. The
// instance is stopped and its run directory removed when t ends (kept, and
// its path printed, when t failed). It costs a full start, so use it only
// for tests that stop the API server.
func StartPrivate(t testing.TB) *Env {
	t.Helper()
	env, err := start()
	if err != nil {
		t.Fatalf("testenv: start private kube-apiserver: %v", err)
	}
	env.private = &privateState{}
	t.Cleanup(func() {
		env.private.mu.Lock()
		defer env.private.mu.Unlock()
		if t.Failed() && env.cluster.apiserver != nil {
			t.Logf("testenv: last lines of %s:\n%s", env.cluster.apiserver.logPath,
				env.cluster.apiserver.logTail(logTailLines))
		}
		env.cluster.keep = t.Failed()
		env.cluster.stop()
	})
	return env
}

// privateState guards the stops and restarts of a private Env.
type privateState struct {
	mu      sync.Mutex
	stopped bool
}

// Stop kills the apiserver and then etcd, as a crash or a lost control
// plane node would, keeping etcd's data, the ports and the credentials so
// that Restart brings back the same cluster at the same URL. Clients get
// connection errors meanwhile. Only an Env of StartPrivate can be stopped.
func (e *Env) Stop(t testing.TB) {
	t.Helper()
	p := e.mustBePrivate(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		t.Fatal("testenv: Stop: already stopped")
	}
	e.cluster.stopProcesses()
	p.stopped = true
}

// Restart starts etcd and the apiserver again on their former ports with
// the data they had, and returns once the apiserver is ready; it returns
// how long that took. The watches of clients then get resumed or, when
// their resource version is too old, relisted.
func (e *Env) Restart(t testing.TB) time.Duration {
	t.Helper()
	p := e.mustBePrivate(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		t.Fatal("testenv: Restart: not stopped")
	}
	began := time.Now()
	// A port of the stopped processes can be taken by another program in
	// between; that is rare on loopback and fails the test with the log.
	if _, err := e.cluster.launch(); err != nil {
		e.cluster.stopProcesses()
		t.Fatalf("testenv: restart: %v", err)
	}
	p.stopped = false
	return time.Since(began)
}

// EtcdURL is the client URL of the environment's etcd, for tests that act
// on storage directly (a compaction).
func (e *Env) EtcdURL() string { return "http://" + hostPort(e.cluster.ports[0]) }

func (e *Env) mustBePrivate(t testing.TB) *privateState {
	t.Helper()
	if e.private == nil {
		t.Fatalf("testenv: only an environment of StartPrivate can be stopped; %s is shared", e.URL)
	}
	return e.private
}
