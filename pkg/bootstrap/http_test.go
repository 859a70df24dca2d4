package bootstrap

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
