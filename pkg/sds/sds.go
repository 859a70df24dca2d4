// Package sds serves secrets over the xDS Secret type: the trust bundle as
// "ROOTCA", and gateway credentialName secrets read from Kubernetes
// Secrets ("kubernetes://[<namespace>/]<name>", with "-cacert" for the CA
// part only).
//
// Key material goes only to an authenticated proxy on a TLS stream, in the
// Secret's own namespace of the proxy's own cluster, whose service account
// may get the Secret there (a SubjectAccessReview in that cluster, cached
// briefly). A proxy a remote cluster authenticated (Proxy.Cluster) is
// served that cluster's Secrets, read through its remote secret's
// kubeconfig (ClusterAdded), and never the local cluster's of the same
// name. Anything else is left out of the response, logged and counted;
// the stream is not ended. Secrets larger than MaxSecretSize, or whose PEM
// does not parse or whose key does not match the certificate, are never
// served.
//
// Secrets are read only where a consumer may be served one: a namespace
// of a cluster is watched while a Watch of a proxy in it asks for one of
// its Secrets, and a change is reported only to the Watches that ask for
// the Secret changed (watch.go, namespaces.go, clusters.go).
package sds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// TypeURL is the xDS type of the resources served.
const TypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

// Bundles is the trust bundle's owner, (*ca.CA).
type Bundles interface {
	Current() *ca.Bundle
	Subscribe() (updates <-chan *ca.Bundle, cancel func())
}

// Config configures a Server.
type Config struct {
	Bundles Bundles
	// Client, when set, backs credentialName secrets: Run watches with it
	// the Secrets of the namespaces that Watches ask for. Without it only
	// ROOTCA is served.
	Client kubernetes.Interface
	// Authorizer decides who may read a Secret; required with Client.
	Authorizer Authorizer
	// RemoteAuthorizer builds the Authorizer of a remote cluster from its
	// client (ClusterAdded). Default: a SARAuthorizer of that cluster
	// with the default cache.
	RemoteAuthorizer func(kubernetes.Interface) Authorizer
	MaxSecretSize    int // bytes; zero is DefaultMaxSecretSize
	Registerer       prometheus.Registerer
	Logger           *slog.Logger
}

// Proxy is the authenticated requester.
type Proxy struct {
	Namespace      string
	ServiceAccount string
	// Secure is true when the stream is TLS and its caller authenticated;
	// nothing is served otherwise.
	Secure bool
	// Cluster is the remote cluster that authenticated the proxy; empty
	// for istiod's own. A remote proxy's credentialName Secrets, and the
	// permission check, are its cluster's alone: refused with reason
	// "unknown_cluster" while that cluster is not registered, and with
	// "remote_cluster" when its reader may not list the Secrets or
	// create the review there; never served from the local cluster.
	Cluster string
}

// Server generates Secret resources and reports their changes.
type Server struct {
	cfg     Config
	log     *slog.Logger
	refused *prometheus.CounterVec
	watched prometheus.Gauge // namespaces whose Secrets are watched
	repeats *repeats

	wake chan struct{} // tells Run that namespaces gained or lost consumers

	mu         sync.Mutex
	consumers  map[secretKey]map[*Watch]struct{} // by the Secret they read
	roots      map[*Watch]struct{}               // the Watches asking for ROOTCA
	namespaces map[nsKey]*namespaceWatch         // those with consumers
	retired    []*namespaceWatch                 // for Run to stop
	remotes    map[string]*remoteCluster         // registered remote clusters, by ID
}

// New returns a server for cfg. It does no I/O and starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Bundles == nil {
		return nil, errors.New("sds: bundles are required")
	}
	if cfg.Client != nil && cfg.Authorizer == nil {
		return nil, errors.New("sds: an authorizer is required with a Kubernetes client")
	}
	if cfg.RemoteAuthorizer == nil {
		cfg.RemoteAuthorizer = func(c kubernetes.Interface) Authorizer {
			return NewSARAuthorizer(c.AuthorizationV1().SubjectAccessReviews(), 0, 0, nil)
		}
	}
	if cfg.MaxSecretSize <= 0 {
		cfg.MaxSecretSize = DefaultMaxSecretSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1),
		consumers: map[secretKey]map[*Watch]struct{}{}, roots: map[*Watch]struct{}{},
		namespaces: map[nsKey]*namespaceWatch{}, remotes: map[string]*remoteCluster{},
		repeats: newRepeats(refusalLogWindow, refusalLogEntries, time.Now),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_sds_refused_total", Help: "Secret resources asked for and not served, by reason.",
		}, []string{"reason"}),
		watched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulwark_sds_watched_namespaces",
			Help: "Namespaces whose Secrets are watched: those where a connected proxy asks for a credentialName Secret.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.refused, s.watched} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("sds: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run watches the trust bundle and, with a client, the Secrets of the
// namespaces Watches ask for, and notifies the Watches of changes until
// ctx is done.
func (s *Server) Run(ctx context.Context) error {
	bundles, cancel := s.cfg.Bundles.Subscribe()
	defer cancel()
	var running sync.WaitGroup
	defer s.stopAll(&running)
	s.reconcile(&running)
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-bundles:
			if !ok {
				return nil
			}
			s.notifyRoots()
		case <-s.wake:
			s.reconcile(&running)
		}
	}
}

// Generate returns the secrets of names that p may have, in the order of
// names. Names it may not have, or that do not exist or are invalid, are
// left out and logged. A credentialName Secret is found only in a
// namespace a Watch asks for (Set before Generate). Generate may wait for
// a SubjectAccessReview, and for the Secrets of a namespace just watched
// to be listed: call it holding no lock.
func (s *Server) Generate(ctx context.Context, p Proxy, names []string) []*tlsv3.Secret {
	var out []*tlsv3.Secret
	for _, n := range names {
		sec, err := s.generate(ctx, p, n)
		if err != nil {
			reason := reasonOf(err)
			s.refused.WithLabelValues(reason).Inc()
			level := slog.LevelWarn
			if reason == "not_found" || !s.repeats.first(repeatKey{p.Cluster, p.Namespace, p.ServiceAccount, n, reason}) {
				level = slog.LevelDebug
			}
			s.log.Log(ctx, level, "secret not served", "name", n, "namespace", p.Namespace,
				"serviceAccount", p.ServiceAccount, "cluster", p.Cluster, "reason", reason, "err", err)
			continue
		}
		if sec != nil {
			out = append(out, sec)
		}
	}
	return out
}

func (s *Server) generate(ctx context.Context, p Proxy, name string) (*tlsv3.Secret, error) {
	if !p.Secure {
		return nil, errPlaintext
	}
	if name == RootCAName {
		b := s.cfg.Bundles.Current()
		if b == nil || len(b.PEM) == 0 {
			return nil, errNotFound
		}
		return trustedCA(name, b.PEM), nil
	}
	ref, ok := parseName(name, p.Namespace)
	if !ok {
		return nil, errNotFound // not ours: the workload identity is the agent's
	}
	if ref.namespace != p.Namespace {
		return nil, errCrossNS
	}
	if p.Cluster != "" && !s.registered(p.Cluster) {
		return nil, inCluster(p.Cluster, errUnknownCluster)
	}
	secrets, authz, err := s.lister(ctx, nsKey{p.Cluster, ref.namespace})
	if err != nil {
		return nil, inCluster(p.Cluster, err)
	}
	for _, cand := range ref.candidates() {
		secret, err := secrets.Get(cand)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get secret %s/%s: %w", ref.namespace, cand, err)
		}
		allowed, err := authz.CanReadSecret(ctx, ref.namespace, p.ServiceAccount, cand)
		if err != nil {
			if apierrors.IsForbidden(err) {
				err = fmt.Errorf("%w: %w", errReviewForbidden, err)
			}
			return nil, inCluster(p.Cluster, fmt.Errorf("authorize %s/%s: %w", ref.namespace, cand, err))
		}
		if !allowed {
			return nil, errUnauthorized
		}
		if ref.caOnly {
			return validation(name, secret, s.cfg.MaxSecretSize)
		}
		return certificate(name, secret, s.cfg.MaxSecretSize)
	}
	return nil, errNotFound
}

// registered reports whether the remote cluster id is registered.
func (s *Server) registered(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.remotes[id]
	return ok
}

// inCluster marks an error of a remote cluster's: the refusals of its
// reader (a list or a review forbidden) are "remote_cluster".
func inCluster(cluster string, err error) error {
	if cluster == "" {
		return err
	}
	if errors.Is(err, errListForbidden) || errors.Is(err, errReviewForbidden) {
		return fmt.Errorf("cluster %s: %w: %w", cluster, errRemoteCluster, err)
	}
	return fmt.Errorf("cluster %s: %w", cluster, err)
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, errPlaintext):
		return "plaintext"
	case errors.Is(err, errCrossNS):
		return "cross_namespace"
	case errors.Is(err, errRemoteCluster):
		return "remote_cluster"
	case errors.Is(err, errUnknownCluster):
		return "unknown_cluster"
	case errors.Is(err, errListForbidden), errors.Is(err, errReviewForbidden):
		return "forbidden"
	case errors.Is(err, errUnauthorized):
		return "unauthorized"
	case errors.Is(err, errNotFound):
		return "not_found"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrNoMaterial), errors.Is(err, ErrNoCA), errors.Is(err, ErrBadPEM), errors.Is(err, ErrKeyMismatch):
		return "invalid"
	}
	return "error"
}
