package bootstrap

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/service"
	"github.com/bulwark-mesh/bulwark/pkg/ca/servingcert"
	"github.com/bulwark-mesh/bulwark/pkg/inject"
	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
	"github.com/bulwark-mesh/bulwark/pkg/migrate"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
	"github.com/bulwark-mesh/bulwark/pkg/xds"
)

// Server is istiod: its components, wired but not started.
type Server struct {
	cfg         Config
	log         *slog.Logger
	registry    *prometheus.Registry
	ca          *ca.CA
	serving     *servingcert.Rotator
	grpc        *grpc.Server
	grpcServing atomic.Bool // the secure gRPC server is serving
	// plaintext serves unauthenticated xDS (Istio's 15010); nil unless
	// Config.GRPCAddr is set. It never serves the CSR API or secrets.
	plaintext *grpc.Server
	// webhooksServing: the admission webhooks answer on the HTTPS port.
	webhooksServing atomic.Bool
	injector        *inject.FileSource
	mesh            *meshconfig.Watcher
	networks        *meshconfig.NetworksWatcher
	model           *model.FileSource // nil without a config dir
	xds             *xds.Server
	keySets         *keyfetch.JWKSCache // RequestAuthentication's
	sds             *sds.Server
	webhooks        http.Handler
	kube            *kubeParts // nil in local mode
	// unsupported reports what of the model's source is not honoured.
	unsupported unsupportedReporter
	// withoutPCDS counts the pods whose proxy does not take the trust
	// bundle over xDS (Istio's injected pods among them); nil in local
	// mode.
	withoutPCDS *migrate.Proxies
}

// unsupportedReporter reports the Istio configuration of the model's
// source that Bulwark does not honour in full: the cluster's objects
// (unsupported.Reporter) or the model directory's (unsupported.Files).
type unsupportedReporter interface {
	Run(ctx context.Context) error
	Handler() http.Handler
}

var (
	_ unsupportedReporter = (*unsupported.Reporter)(nil)
	_ unsupportedReporter = (*unsupported.Files)(nil)
)

// New wires istiod from cfg. It does no I/O and starts nothing.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	td := spiffeid.RequireTrustDomainFromString(cfg.TrustDomain)

	var kube *kubeParts
	if cfg.KubernetesMode() {
		var err error
		if kube, err = newKubeParts(cfg, cfg.PodName, log); err != nil {
			return nil, err
		}
	}
	if kube != nil {
		if err := kube.announceReplica(cfg.RootRotationTick); err != nil {
			return nil, err
		}
	}
	store, rotations, liveness := caStores(cfg, kube)
	authority, err := newCA(cfg, store, rotations, liveness, log)
	if err != nil {
		return nil, err
	}
	if kube != nil {
		if err := kube.distributeRoots(authority); err != nil {
			return nil, err
		}
	}
	rotator, err := servingcert.New(servingcert.Config{
		Issuer:   authority,
		Bundles:  authority,
		DNSNames: cfg.dnsNames(),
		TTL:      cfg.ServingCertTTL,
		Logger:   log.With("component", "servingcert"),
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	registry := newRegistry(authority)
	if err := reportIgnoredSettings(cfg.IgnoredSettings, registry, log); err != nil {
		return nil, err
	}
	if kube != nil {
		if err := kube.watchRemoteClusters(cfg, registry); err != nil {
			return nil, err
		}
		if err := kube.controlRemotes(cfg, authority, registry); err != nil {
			return nil, err
		}
	}
	chain, err := authenticators(cfg, td, authority, kube, log)
	if err != nil {
		return nil, err
	}

	s := &Server{cfg: cfg, log: log, registry: registry, ca: authority, serving: rotator, kube: kube}
	if kube != nil {
		kube.monitor = newAPIServerMonitor(kube.direct, kube.gate, s.registry, log)
		if s.withoutPCDS, err = migrate.NewProxies(kube.client, log.With("component", "migrate")); err != nil {
			return nil, err
		}
		s.registry.MustRegister(s.withoutPCDS.Collector())
	}
	reloads, err := meshconfig.NewReloadMetrics(s.registry)
	if err != nil {
		return nil, err
	}
	if s.mesh, err = newMeshWatcher(cfg, reloads, log); err != nil {
		return nil, err
	}
	if s.networks, err = newNetworksWatcher(cfg, reloads, log); err != nil {
		return nil, err
	}
	s.registry.MustRegister(s.mesh.Collector())
	injectStore := inject.NewStore()
	s.injector = inject.NewFileSource(cfg.InjectConfigDir, injectStore, log.With("component", "inject"))
	s.webhooks = webhookHandler(injectStore, s.mesh.Current, cfg, log.With("component", "webhook"))
	if kube != nil {
		kube.keepWebhooks(cfg, authority, s.webhooksServing.Load)
	}
	s.grpc = newGRPCServer(cfg, s.tlsConfig(), log)
	if err := s.wireXDS(chain, td); err != nil {
		return nil, err
	}
	if cfg.GRPCAddr != "" {
		s.plaintext = newGRPCServer(cfg, nil, log)
		s.xds.RegisterPlaintext(s.plaintext)
	}
	service.New(service.Config{
		Authenticator: chain,
		Signer:        authority,
		Metrics:       service.NewMetrics(s.registry),
		Logger:        log.With("component", "csr"),
		RateLimit:     cfg.CSRRateLimit,
		Burst:         cfg.CSRBurst,
	}).Register(s.grpc)
	return s, nil
}

// newMeshWatcher watches the mesh configuration file, starting from
// cfg.Mesh. An update the injector could not use is refused like an
// invalid one, so the last good configuration keeps serving.
func newMeshWatcher(cfg Config, metrics *meshconfig.ReloadMetrics, log *slog.Logger) (*meshconfig.Watcher, error) {
	w, err := meshconfig.NewWatcher(meshconfig.WatcherConfig{
		Path:     cfg.MeshConfigFile,
		Defaults: cfg.MeshDefaults(),
		Initial:  cfg.Mesh,
		Check:    inject.CheckMeshConfig,
		Metrics:  metrics,
		Logger:   log.With("component", "meshconfig"),
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := inject.CheckMeshConfig(w.Current()); err != nil {
		return nil, fmt.Errorf("config: mesh config: %w", err)
	}
	return w, nil
}

// NewCA builds the CA istiod signs with from cfg, so that every command
// that signs or rotates (istiod itself, mint-cert, ca) finds the same key
// material and rotation state: the Secrets of cfg.Namespace in Kubernetes
// mode, the state directory otherwise.
func NewCA(cfg Config, log *slog.Logger) (*ca.CA, error) {
	var kube *kubeParts
	if cfg.KubernetesMode() {
		var err error
		if kube, err = newKubeParts(cfg, cfg.PodName, log); err != nil {
			return nil, err
		}
	}
	if kube != nil {
		// Not run: a command reads the replicas' Leases, renews none.
		if err := kube.announceReplica(cfg.RootRotationTick); err != nil {
			return nil, err
		}
	}
	store, rotations, liveness := caStores(cfg, kube)
	return newCA(cfg, store, rotations, liveness, log)
}

// newCA builds the CA with its self-signed root kept in store, the root
// rotation state in rotations, and the replicas that run told by
// liveness (nil: by their reports alone).
func newCA(cfg Config, store ca.Store, rotations ca.RotationStore, liveness ca.Liveness, log *slog.Logger) (*ca.CA, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	keyType, err := ca.ParseKeyType(cfg.CAKeyType)
	if err != nil {
		return nil, fmt.Errorf("ca key type: %w", err)
	}
	authority, err := ca.New(ca.Config{
		TrustDomain: spiffeid.RequireTrustDomainFromString(cfg.TrustDomain),
		KeyType:     keyType,
		RootTTL:     cfg.RootTTL,
		CACertsDir:  cfg.CACertsDir,
		Store:       store,
		DefaultTTL:  cfg.DefaultCertTTL,
		MaxTTL:      cfg.MaxCertTTL,
		Rotations:   rotations,
		RotationPolicy: ca.RotationPolicy{
			Grace:               cfg.RootRotationGrace,
			Timeout:             cfg.RootRotationTimeout,
			ProceedAfterTimeout: cfg.RootRotationProceedAfterTimeout,
		},
		RotationTick:        cfg.RootRotationTick,
		RootGracePercentile: cfg.RootGracePercentile,
		Replica:             replicaName(cfg.PodName),
		Liveness:            liveness,
		Logger:              log,
	})
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return authority, nil
}

// authenticators builds the chain in its fixed order: client certificate,
// then OIDC JWT if a rule is set, then Kubernetes JWT in Kubernetes mode.
func authenticators(cfg Config, td spiffeid.TrustDomain, authority *ca.CA, kube *kubeParts, log *slog.Logger) (authn.Chain, error) {
	roots := func() *x509.CertPool {
		if b := authority.Current(); b != nil {
			return b.Pool()
		}
		return x509.NewCertPool()
	}
	chain := authn.Chain{authn.NewClientCert(td, roots, time.Now)}
	if cfg.JWTRule != "" {
		rule, err := authn.ParseJWTRule(cfg.JWTRule)
		if err != nil {
			return nil, fmt.Errorf("jwt rule: %w", err)
		}
		roots, err := jwtRoots(cfg.JWTCAFile)
		if err != nil {
			return nil, err
		}
		chain = append(chain, authn.NewOIDC(authn.OIDCConfig{TrustDomain: td, Rule: rule, Fetch: keyfetch.Config{
			RootCAs:         roots,
			AllowedPrefixes: cfg.JWTFetchAllowedPrefixes,
			RefreshInterval: cfg.JWTKeysRefreshInterval,
			Logger:          log,
		}}))
		log.Info("OIDC JWT authentication enabled", "issuer", rule.Issuer)
	}
	if kube != nil {
		chain = append(chain, authn.NewKubeJWT(authn.KubeJWTConfig{
			TrustDomain:     td,
			Reviewer:        authn.NewClientGoReviewer(kube.direct),
			ClusterID:       cfg.ClusterID,
			Aliases:         cfg.ClusterAliases,
			Remote:          kube.remoteReviewers(),
			Audiences:       cfg.TokenAudiences,
			RequirePodBound: cfg.RequirePodBoundTokens,
		}))
	}
	return chain, nil
}

func newRegistry(authority *ca.CA) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		// The default Go metrics, and the heap the last GC found live
		// (go_gc_heap_live_bytes): what istiod keeps, apart from garbage
		// not yet collected.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)},
		)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	reg.MustRegister(authority.Collectors()...)
	return reg
}

// Run starts every component and blocks until ctx is cancelled or one fails.
// On cancellation, in-flight RPCs get GracePeriod to finish.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if s.kube == nil {
		// The CA's keys live in the state directory: istiod ca reset
		// must not delete them under a running istiod.
		release, err := ca.HoldDir(s.cfg.StateDir)
		if err != nil {
			return err
		}
		defer release()
	}
	// The gRPC ports face proxies and are bounded in connections.
	ports := []port{{s.cfg.SecureGRPCAddr, s.cfg.MaxConnections}, {s.cfg.HTTPAddr, 0}, {s.cfg.MonitoringAddr, 0}, {s.cfg.HTTPSAddr, 0}}
	if s.plaintext != nil {
		ports = append(ports, port{s.cfg.GRPCAddr, s.cfg.MaxConnections})
	}
	lns, err := listenAll(ports)
	if err != nil {
		return err
	}
	secure, httpLn, monLn, webhookLn := lns[0], lns[1], lns[2], lns[3]
	s.log.Info("istiod starting", "mode", s.mode(), "trust_domain", s.cfg.TrustDomain,
		"secure_grpc", secure.Addr().String(), "http", httpLn.Addr().String(), "monitoring", monLn.Addr().String(), "webhooks", webhookLn.Addr().String(),
		"state_dir", s.cfg.StateDir, "cacerts_dir", s.cfg.CACertsDir)
	s.log.Info("mesh configuration", append([]any{"file", s.cfg.MeshConfigFile}, meshconfig.Summary(s.mesh.Current())...)...)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(ctx, httpLn, s.readyHandler(), s.cfg.GracePeriod) })
	g.Go(func() error { return serveHTTP(ctx, monLn, s.monitoringHandler(), s.cfg.GracePeriod) })
	g.Go(func() error { return s.runCA(ctx) })
	g.Go(func() error { s.ca.Rotator().Run(ctx, s.rotationDataPlane); return nil })
	if s.kube != nil {
		g.Go(func() error { return s.kube.run(ctx) })
	}
	g.Go(func() error { return s.serving.Run(ctx) })
	g.Go(func() error { return s.serveSecureGRPC(ctx, secure) })
	if s.plaintext != nil {
		s.log.Warn("plaintext xDS enabled: proxies on it are not authenticated and get configuration only", "addr", lns[4].Addr().String())
		g.Go(func() error { return s.serveGRPC(ctx, s.plaintext, lns[4], "plaintext gRPC", nil) })
	}
	g.Go(func() error { return s.mesh.Run(ctx) })
	g.Go(func() error { return s.networks.Run(ctx) })
	if s.kube != nil {
		g.Go(func() error { return s.kube.followNetworks(ctx, s.networks, s.cfg.ClusterID) })
	}
	g.Go(func() error { return s.injector.Run(ctx) })
	g.Go(func() error { return s.xds.Run(ctx) })
	g.Go(func() error { return s.keySets.Run(ctx) })
	g.Go(func() error { return s.sds.Run(ctx) })
	if s.model != nil {
		g.Go(func() error { return s.model.Run(ctx) })
	}
	if s.unsupported != nil {
		g.Go(func() error { return s.unsupported.Run(ctx) })
	}
	if s.withoutPCDS != nil {
		g.Go(func() error { return s.withoutPCDS.Run(ctx) })
	}
	g.Go(func() error { return s.serveWebhooks(ctx, webhookLn) })
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	s.log.Info("istiod stopped")
	return nil
}

// rotationDataPlane is what a root rotation waits for on this replica:
// its proxies' ACKs of a bundle with root and, in Kubernetes mode, every
// namespace's istio-ca-root-cert holding it, in its own cluster and in
// the remote clusters it controls ("<cluster>/<namespace>").
func (s *Server) rotationDataPlane(_ context.Context, root *x509.Certificate) ca.DataPlane {
	dp := ca.DataPlane{Unacked: s.xds.ProxiesWithoutRoot(root)}
	if s.kube != nil && s.kube.rootCerts != nil {
		dp.Missing = s.kube.rootCerts.NamespacesWithoutRoot(root)
	}
	if s.kube != nil {
		dp.Missing = append(dp.Missing, s.kube.remoteRoots.missing(root)...)
	}
	return dp
}

// serveSecureGRPC serves the secure port once the serving certificate
// exists.
func (s *Server) serveSecureGRPC(ctx context.Context, ln net.Listener) error {
	select {
	case <-ctx.Done():
		ln.Close()
		return nil
	case <-s.serving.Ready():
	}
	return s.serveGRPC(ctx, s.grpc, ln, "secure gRPC", &s.grpcServing)
}

// serveGRPC serves gs on ln until ctx is done, then drains in-flight RPCs
// for the grace period. serving, when given, is true while it serves.
func (s *Server) serveGRPC(ctx context.Context, gs *grpc.Server, ln net.Listener, name string, serving *atomic.Bool) error {
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(ln) }()
	if serving != nil {
		serving.Store(true)
	}
	s.log.Info(name+" serving", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", name, err)
	case <-ctx.Done():
	}
	if serving != nil {
		serving.Store(false)
	}
	drained := make(chan struct{})
	go func() { gs.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(s.cfg.GracePeriod):
		s.log.Warn("grace period over, closing remaining RPCs", "server", name, "grace_period", s.cfg.GracePeriod)
		gs.Stop()
		<-drained
	}
	return nil
}

// Ready reports whether istiod can serve: the CA is loaded, the secure
// gRPC server serves with a certificate, xDS serves a mesh model read from
// its source and, in Kubernetes mode, the caches are synced.
func (s *Server) Ready() bool {
	return s.ca.Ready() && s.grpcServing.Load() && s.kubeSynced() && s.xds.HasSynced()
}

func (s *Server) mode() string {
	if s.cfg.KubernetesMode() {
		return "kubernetes"
	}
	return "local"
}

// port is an address to listen on and its bound on open connections (0:
// none).
type port struct {
	addr     string
	maxConns int
}

// listenAll listens on every port, or on none: on an error the listeners
// already open are closed.
func listenAll(ports []port) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, len(ports))
	for _, p := range ports {
		ln, err := listen(p.addr, p.maxConns)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// listen binds addr; maxConns > 0 bounds the open connections.
func listen(addr string, maxConns int) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	if maxConns > 0 {
		ln = limitListener(ln, maxConns)
	}
	return ln, nil
}

func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}
