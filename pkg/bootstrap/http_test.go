package bootstrap

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
)

// Profiles are served to loopback callers only, as /debug/syncz is.
func TestProfilesAreForLoopbackCallersOnly(t *testing.T) {
	h := loopbackOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	for addr, want := range map[string]int{
		"127.0.0.1:5000":        http.StatusOK,
		"[::1]:5000":            http.StatusOK,
		"[::ffff:127.0.0.1]:80": http.StatusOK,
		"10.0.0.7:5000":         http.StatusForbidden,
		"[fd00::1]:5000":        http.StatusForbidden,
		"not an address":        http.StatusForbidden,
	} {
		r := httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%s: status %d, want %d", addr, w.Code, want)
		}
	}
}

// In local mode /debug/unsupported lists, to loopback callers, the fields
// the file model ignores in the model directory.
func TestDebugUnsupportedInLocalMode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.ConfigDir = t.TempDir()
	dr := "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: app}\n" +
		"spec: {host: reviews, trafficPolicy: {connectionPool: {tcp: {maxConnections: 1}}}}\n"
	if err := os.WriteFile(filepath.Join(cfg.ConfigDir, "dr.yaml"), []byte(dr), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, catest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	files, ok := s.unsupported.(*unsupported.Files)
	if !ok {
		t.Fatalf("reporter %T, want the file model's", s.unsupported)
	}
	files.Reload()
	for addr, want := range map[string]int{"127.0.0.1:5000": http.StatusOK, "10.0.0.7:5000": http.StatusForbidden} {
		r := httptest.NewRequest(http.MethodGet, "/debug/unsupported", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		s.monitoringHandler().ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%s: status %d, want %d", addr, w.Code, want)
		}
		if want == http.StatusOK && !strings.Contains(w.Body.String(), "spec.trafficPolicy.connectionPool") {
			t.Errorf("/debug/unsupported: %s", w.Body.String())
		}
	}
}
