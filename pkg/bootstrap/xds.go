package bootstrap

import (
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
	"github.com/bulwark-mesh/bulwark/pkg/xds"
	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
)

// wireXDS builds the mesh model and the ADS server, registered on the
// secure gRPC port beside the CSR API and authenticated by the same chain.
//
// The model comes from --configDir when it is given, in either mode, and
// otherwise from the API server in Kubernetes mode; beside it, a reporter
// of the same source says what of it is not honoured. In Kubernetes mode
// SDS also serves credentialName secrets, a remote cluster's proxies
// those of their own cluster.
func (s *Server) wireXDS(chain authn.Authenticator, td spiffeid.TrustDomain) error {
	store := model.NewStore()
	opts := model.Options{Domain: model.DefaultDomain, RootNamespace: s.cfg.Namespace}
	switch {
	case s.cfg.ConfigDir != "":
		s.model = model.NewFileSource(model.FileConfig{
			Dir:       s.cfg.ConfigDir,
			Publisher: store,
			Options:   opts,
			Logger:    s.log.With("component", "model"),
		})
		files := unsupported.NewFiles(unsupported.FilesConfig{Dir: s.cfg.ConfigDir, Logger: s.log.With("component", "unsupported")})
		if err := s.registry.Register(files.Collector()); err != nil {
			return fmt.Errorf("unsupported-config reporter: %w", err)
		}
		s.unsupported = files
	case s.kube != nil:
		if err := s.kube.watchModel(store, opts, s.cfg.ClusterID, s.cfg.Namespace, s.cfg.MeshNetworks, s.registry); err != nil {
			return err
		}
		r, err := s.kube.reportUnsupported(s.registry)
		if err != nil {
			return err
		}
		s.unsupported = r
	}
	sdsCfg := sds.Config{
		Bundles:    s.ca,
		Registerer: s.registry,
		Logger:     s.log.With("component", "sds"),
	}
	if s.kube != nil {
		sdsCfg.Client = s.kube.client
		sdsCfg.Authorizer = s.kube.secretAuthorizer()
	}
	secrets, err := sds.New(sdsCfg)
	if err != nil {
		return fmt.Errorf("sds: %w", err)
	}
	s.sds = secrets
	if s.kube != nil && s.kube.clusters != nil {
		// A remote cluster's proxies get that cluster's credentialName
		// Secrets, read with its remote secret's client.
		s.kube.clusters.Notify(secrets)
	}
	// RequestAuthentication key sets are fetched with the hardening and
	// the flags of the CSR path's OIDC keys.
	roots, err := jwtRoots(s.cfg.JWTCAFile)
	if err != nil {
		return err
	}
	s.keySets = keyfetch.New(keyfetch.Config{
		RootCAs:         roots,
		AllowedPrefixes: s.cfg.JWTFetchAllowedPrefixes,
		RefreshInterval: s.cfg.JWTKeysRefreshInterval,
		Logger:          s.log.With("component", "reqauthn"),
	}).JWKSCache(keyfetch.URLRule{LoopbackHTTP: s.cfg.AllowLoopbackHTTPJWKS})
	srv, err := xds.New(xds.Config{
		KeySets:        s.keySets,
		Secrets:        secrets,
		TrustBundle:    s.ca,
		Model:          store,
		Mesh:           s.mesh,
		Authenticator:  chain,
		TrustDomain:    td,
		ClusterID:      s.cfg.ClusterID,
		ClusterAliases: s.cfg.ClusterAliases,

		AllowInsecureSkipVerify: s.cfg.AllowInsecureSkipVerify,
		ScopeGatewayToNamespace: s.cfg.ScopeGatewayToNamespace,
		AllowLoopbackHTTPJWKS:   s.cfg.AllowLoopbackHTTPJWKS,
		SidecarIngressTLS:       s.cfg.SidecarIngressTLS,
		Networks:                s.networks,
		Registerer:              s.registry,
		Logger:                  s.log.With("component", "xds"),

		SystemNamespace: s.cfg.Namespace,
		ControlPlane:    s.controlPlane(),
		DebugPages:      s.debugPages(),
	})
	if err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	srv.Register(s.grpc)
	s.xds = srv
	return nil
}

// controlPlane is how this istiod names itself to istioctl.
func (s *Server) controlPlane() debug.ControlPlane {
	return debug.ControlPlane{ID: replicaName(s.cfg.PodName), Version: s.cfg.Version}
}
