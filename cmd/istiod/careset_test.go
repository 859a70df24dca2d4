package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/bootstrap"
)

// localIstiod is istiod running in-process in local mode on a state
// directory, as `istiod discovery --state-dir` runs it.
type localIstiod struct {
	cfg  bootstrap.Config
	stop func()
}

// startLocalIstiod runs istiod on state, with root rotation moving every
// 50ms and activating as soon as the (empty) data plane allows, and waits
// until it is ready.
func startLocalIstiod(t *testing.T, state string) *localIstiod {
	t.Helper()
	cfg := bootstrap.DefaultConfig()
	cfg.StateDir = state
	cfg.SecureGRPCAddr, cfg.HTTPAddr = freeAddr(t), freeAddr(t)
	cfg.MonitoringAddr, cfg.HTTPSAddr = freeAddr(t), freeAddr(t)
	cfg.GracePeriod = time.Second
	cfg.RootRotationTick = 50 * time.Millisecond
	cfg.RootRotationGrace = time.Millisecond
	srv, err := bootstrap.New(cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatalf("bootstrap.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	go func() { exited <- srv.Run(ctx) }()
	p := &localIstiod{cfg: cfg}
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-exited; err != nil {
				t.Errorf("istiod: Run: %v", err)
			}
		})
	}
	t.Cleanup(p.stop)
	waitUntil(t, "istiod ready", 30*time.Second, srv.Ready)
	return p
}

// servingIssuer is the subject key id of the key that signed the
// certificate istiod serves on its secure gRPC port: the key it signs
// with, as the key that signs re-issues istiod's own certificate.
func (p *localIstiod) servingIssuer(t *testing.T) string {
	t.Helper()
	conn, err := tls.Dial("tcp", p.cfg.SecureGRPCAddr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) // the chain is checked below
	if err != nil {
		t.Fatalf("dial istiod: %v", err)
	}
	defer conn.Close()
	chain := conn.ConnectionState().PeerCertificates
	if len(chain) == 0 {
		t.Fatal("istiod served no certificate")
	}
	return hex.EncodeToString(chain[0].AuthorityKeyId)
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

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// caCLI runs `istiod ca <args> --state-dir state`.
func caCLI(state string, args ...string) (int, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"ca"}, append(args, "--state-dir", state)...), noEnv, &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

// statusLine is the value of the line of `istiod ca status` that starts
// with prefix.
func statusLine(t *testing.T, state, prefix string) string {
	t.Helper()
	code, out := caCLI(state, "status")
	if code != exitOK {
		t.Fatalf("ca status: exit %d\n%s", code, out)
	}
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// keyID is the subject key id `istiod ca status` shows.
func keyID(t *testing.T, state string) string {
	t.Helper()
	line := statusLine(t, state, "signing key id:")
	_, ski, ok := strings.Cut(line, "subject key id ")
	if !ok {
		t.Fatalf("ca status shows no subject key id: %q", line)
	}
	return strings.TrimSuffix(ski, ")")
}

// After a root rotation istiod signs with the key the rotation made,
// kept in rotation.json; `istiod ca status` says so. Deleting
// istio-ca-secret alone then starts nothing over. `istiod ca reset`,
// refused while istiod runs, deletes both, and the next istiod signs with
// a new root whose key is neither of the old ones.
func TestCAResetStartsOverAfterARotation(t *testing.T) {
	state := t.TempDir()
	first := startLocalIstiod(t, state)
	original := keyID(t, state)
	if where := statusLine(t, state, "signing key:"); where != "directory "+filepath.Join(state, "istio-ca-secret") {
		t.Errorf("before a rotation, ca status says the key is in %q", where)
	}
	if got := first.servingIssuer(t); got != original {
		t.Fatalf("istiod signs with key %s; ca status says %s", got, original)
	}
	if code, out := caCLI(state, "rotate"); code != exitOK {
		t.Fatalf("ca rotate: exit %d\n%s", code, out)
	}
	// Nothing holds the rotation back: it activates at once, and with no
	// certificate of the old key outstanding it may be done as soon.
	waitUntil(t, "the new key to sign", 30*time.Second, func() bool { return first.servingIssuer(t) != original })
	rotated := keyID(t, state)
	if got := first.servingIssuer(t); got != rotated || rotated == original {
		t.Fatalf("after activation istiod signs with %s; ca status says %s (the original key %s)", got, rotated, original)
	}
	if where := statusLine(t, state, "signing key:"); where != "file "+filepath.Join(state, "rotation.json")+", the new set" {
		t.Errorf("after activation, ca status says the key is in %q", where)
	}

	before := snapshot(t, state)
	code, out := caCLI(state, "reset", "--yes-delete-the-ca-keys")
	if code != exitError || !strings.Contains(out, "istiod is running") {
		t.Fatalf("ca reset while istiod runs: exit %d\n%s", code, out)
	}
	// The running istiod may move its rotation meanwhile (rotation.json);
	// the reset must have deleted nothing, and left the keys as they were.
	after := snapshot(t, state)
	for path, content := range before {
		got, ok := after[path]
		if !ok || (strings.HasPrefix(path, "/istio-ca-secret/") && got != content) {
			t.Errorf("a refused reset deleted or changed %s", path)
		}
	}

	first.stop()
	code, out = caCLI(state, "reset", "--yes-delete-the-ca-keys")
	if code != exitOK || !strings.Contains(out, "deleted "+filepath.Join(state, "rotation.json")) ||
		!strings.Contains(out, "deleted "+filepath.Join(state, "istio-ca-secret")) {
		t.Fatalf("ca reset: exit %d\n%s", code, out)
	}
	if where := statusLine(t, state, "signing key:"); !strings.HasPrefix(where, "none yet") {
		t.Errorf("after the reset, ca status says the key is in %q", where)
	}

	second := startLocalIstiod(t, state)
	fresh := second.servingIssuer(t)
	if fresh == original || fresh == rotated {
		t.Fatalf("after the reset istiod signs with an old key %s (original %s, rotated %s)", fresh, original, rotated)
	}
	if got := keyID(t, state); got != fresh {
		t.Errorf("ca status says key %s; istiod signs with %s", got, fresh)
	}
	if phase := statusLine(t, state, "phase:"); !strings.HasPrefix(phase, "idle") {
		t.Errorf("after the reset the rotation is in phase %q", phase)
	}
	roots, err := os.ReadFile(filepath.Join(state, "istio-ca-secret", "root-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(roots, []byte("BEGIN CERTIFICATE")); n != 1 {
		t.Errorf("the new istio-ca-secret holds %d roots, want its own alone", n)
	}
}

// Without its confirmation flag `istiod ca reset` is a usage error that
// names the flag, and the state directory stays as it was.
func TestCAResetWithoutConfirmationChangesNothing(t *testing.T) {
	state := t.TempDir()
	if code := run([]string{"mint-cert", "--state-dir", state, "--service-account", "a", "--out-dir", t.TempDir() + "/creds"}, noEnv, new(bytes.Buffer), new(bytes.Buffer)); code != exitOK {
		t.Fatal("mint-cert failed")
	}
	if code, out := caCLI(state, "rotate"); code != exitOK {
		t.Fatalf("ca rotate: exit %d\n%s", code, out)
	}
	before := snapshot(t, state)
	for _, args := range [][]string{{"reset"}, {"reset", "--yes-delete-the-ca-keys=false"}} {
		code, out := caCLI(state, args...)
		if code != exitUsage || !strings.Contains(out, "--yes-delete-the-ca-keys") {
			t.Errorf("%v: exit %d, want %d naming the flag\n%s", args, code, exitUsage, out)
		}
	}
	if after := snapshot(t, state); !maps.Equal(before, after) {
		t.Errorf("ca reset without confirmation changed the state directory:\nbefore %v\nafter  %v", before, after)
	}
}

// snapshot is every regular file under dir with its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		files[strings.TrimPrefix(path, dir)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
