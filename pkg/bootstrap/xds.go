package bootstrap

import (
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
	"github.com/bulwark-mesh/bulwark/pkg/xds"
)

// wireXDS builds the mesh model and the ADS server, registered on the
// secure gRPC port beside the CSR API and authenticated by the same chain.
func (s *Server) wireXDS(chain authn.Authenticator, td spiffeid.TrustDomain) error {
	store := model.NewStore()
	if s.cfg.ConfigDir != "" {
		s.model = model.NewFileSource(model.FileConfig{
			Dir:       s.cfg.ConfigDir,
			Publisher: store,
			Options:   model.Options{Domain: "cluster.local", RootNamespace: s.cfg.Namespace},
			Logger:    s.log.With("component", "model"),
		})
	}
	// SDS serves the trust bundle as ROOTCA. Gateway credentialName secrets
	// need a Secret informer and SubjectAccessReviews, which istiod's RBAC
	// does not grant yet, so no Kubernetes client is given.
	secrets, err := sds.New(sds.Config{
		Bundles:    s.ca,
		Registerer: s.registry,
		Logger:     s.log.With("component", "sds"),
	})
	if err != nil {
		return fmt.Errorf("sds: %w", err)
	}
	s.sds = secrets
	srv, err := xds.New(xds.Config{
		Secrets:       secrets,
		Model:         store,
		Authenticator: chain,
		TrustDomain:   td,
		Registerer:    s.registry,
		Logger:        s.log.With("component", "xds"),
	})
	if err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	srv.Register(s.grpc)
	s.xds = srv
	return nil
}
