package bootstrap

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyHandler serves /ready: 200 once the CA is loaded and the secure gRPC
// server serves, 503 before. It stays 200 while the API server is
// unreachable after the caches synced, since istiod then still serves what
// matters (certificates for client-certificate callers, the last synced
// configuration, injection); the body says so.
func (s *Server) readyHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			remotes := s.kube == nil || s.kube.remotesSynced()
			fmt.Fprintf(w, "not ready: ca loaded=%t, secure grpc serving=%t, kubernetes synced=%t, remote clusters synced=%t\n", s.ca.Ready(), s.grpcServing.Load(), s.kubeSynced(), remotes)
			return
		}
		if s.kube != nil && s.kube.monitor != nil {
			if down, since := s.kube.monitor.Unreachable(); down {
				fmt.Fprintf(w, "ok: kubernetes API server unreachable since %s; serving the last synced state\n", since.UTC().Format(time.RFC3339))
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// monitoringHandler serves /metrics, /version (istiod's version, as
// Istio's istiod serves it to `istioctl version`), and, to loopback
// callers only, /debug/syncz (per proxy: what was sent, ACKed and NACKed),
// /debug/unsupported (the Istio objects Bulwark does not honour in full),
// /debug/clusterz (the remote clusters, as Istio's)
// and Go's profiles under /debug/pprof/.
func (s *Server) monitoringHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(s.controlPlane().VersionJSON())
	})
	mux.Handle("GET /debug/syncz", s.xds.SynczHandler())
	for name, h := range s.debugPages() {
		mux.Handle("GET /debug/"+name, loopbackOnly(h))
	}
	mux.Handle("GET /debug/pprof/", loopbackOnly(http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/cmdline", loopbackOnly(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("GET /debug/pprof/profile", loopbackOnly(http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/symbol", loopbackOnly(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("GET /debug/pprof/trace", loopbackOnly(http.HandlerFunc(pprof.Trace)))
	return mux
}

// loopbackOnly answers 403 to callers not on a loopback address: what h
// serves is for an operator on istiod's host (kubectl port-forward, exec),
// not for the network.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// jwtRoots are the roots trusted when fetching the OIDC issuer's discovery
// document and keys: caFile's when given; nil otherwise, which means the
// system roots, or the roots carried in the binary where the system has none.
func jwtRoots(caFile string) (*x509.CertPool, error) {
	if caFile == "" {
		return nil, nil
	}
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("jwt ca file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("jwt ca file %s: no PEM certificates", caFile)
	}
	return pool, nil
}
