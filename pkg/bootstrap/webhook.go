package bootstrap

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/inject"
	"github.com/bulwark-mesh/bulwark/pkg/inject/validate"
)

// webhookHandler routes the admission webhooks served on the HTTPS port:
// sidecar injection and validation of the security resources.
func webhookHandler(store *inject.Store, mesh func() *meshv1alpha1.MeshConfig, cfg Config, log *slog.Logger) http.Handler {
	injector := inject.NewHandler(store, log, inject.WithMeshConfig(mesh))
	validator := validate.NewHandler(log, validate.AllowLoopbackHTTPJWKS(cfg.AllowLoopbackHTTPJWKS),
		validate.AllowInsecureSkipVerify(cfg.AllowInsecureSkipVerify))
	mux := http.NewServeMux()
	mux.Handle("/inject", injector)
	mux.Handle("/inject/", injector)
	mux.Handle("/validate", validator)
	mux.Handle("/validate/", validator)
	return mux
}

// serveWebhooks serves the admission webhooks over TLS with istiod's serving
// certificate, once it exists.
func (s *Server) serveWebhooks(ctx context.Context, ln net.Listener) error {
	select {
	case <-ctx.Done():
		ln.Close()
		return nil
	case <-s.serving.Ready():
	}
	tlsLn := tls.NewListener(ln, &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: s.serving.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	})
	s.webhooksServing.Store(true)
	defer s.webhooksServing.Store(false)
	return serveHTTP(ctx, tlsLn, s.webhooks, s.cfg.GracePeriod)
}
