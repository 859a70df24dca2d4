package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// serveAdmin serves the admin endpoints pilot-agent calls on Envoy:
// /stats (its readiness probe, pilot/cmd/pilot-agent/status/util/stats.go,
// and the active-connections check of pkg/envoy/agent.go) and
// /drain_listeners (pkg/envoy/admin.go, on SIGTERM). Any other path
// answers 404 and is counted, so a test sees what else was asked.
func serveAdmin(ctx context.Context, addr string, st *store, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		count(st, r)
		q := r.URL.Query()
		if q.Has("format") {
			http.Error(w, "the stand-in serves text stats only", http.StatusNotImplemented)
			return
		}
		var filter *regexp.Regexp
		if f := q.Get("filter"); f != "" {
			var err error
			if filter, err = regexp.Compile(f); err != nil {
				http.Error(w, fmt.Sprintf("Invalid re2 regex: %v", err), http.StatusBadRequest)
				return
			}
		}
		var b strings.Builder
		st.read(func(s *State) {
			for _, name := range slices.Sorted(maps.Keys(s.Stats)) {
				if filter != nil && !filter.MatchString(name) {
					continue
				}
				fmt.Fprintf(&b, "%s: %d\n", name, s.Stats[name])
			}
		})
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte(b.String()))
	})
	mux.HandleFunc("/drain_listeners", func(w http.ResponseWriter, r *http.Request) {
		count(st, r)
		if r.Method != http.MethodPost {
			http.Error(w, "This endpoint requires POST", http.StatusMethodNotAllowed)
			return
		}
		log.Info("draining listeners", "query", r.URL.RawQuery)
		_, _ = w.Write([]byte("OK\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		count(st, r)
		log.Warn("admin path not served", "method", r.Method, "path", r.URL.Path)
		http.NotFound(w, r)
	})

	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

// count records a request as "METHOD /path?query". The file is written
// when a new kind of request appears, not for every probe.
func count(st *store, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		key += "?" + r.URL.RawQuery
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.s.Admin[key]++
	if st.s.Admin[key] == 1 {
		st.writeLocked()
	}
}
