// Package sds serves secrets over the xDS Secret type: the trust bundle as
// "ROOTCA", and gateway credentialName secrets read from Kubernetes
// Secrets ("kubernetes://[<namespace>/]<name>", with "-cacert" for the CA
// part only).
//
// Key material goes only to an authenticated proxy on a TLS stream, in the
// Secret's own namespace, whose service account may get the Secret (a
// SubjectAccessReview, cached briefly). Anything else is left out of the
// response, logged and counted; the stream is not ended. Secrets larger
// than MaxSecretSize, or whose PEM does not parse or whose key does not
// match the certificate, are never served.
package sds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// TypeURL is the xDS type of the resources served.
const TypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

// Bundles is the trust bundle's owner, (*ca.CA).
type Bundles interface {
	Current() *ca.Bundle
	Subscribe() (updates <-chan *ca.Bundle, cancel func())
}

// secretGetter looks Secrets up, from an informer's cache.
type secretGetter interface {
	Get(namespace, name string) (*corev1.Secret, error)
}

// Config configures a Server.
type Config struct {
	Bundles Bundles
	// Client, when set, backs credentialName secrets: Run watches
	// Secrets with it. Without it only ROOTCA is served.
	Client kubernetes.Interface
	// Authorizer decides who may read a Secret; required with Client.
	Authorizer    Authorizer
	MaxSecretSize int // bytes; zero is DefaultMaxSecretSize
	Registerer    prometheus.Registerer
	Logger        *slog.Logger
}

// Proxy is the authenticated requester.
type Proxy struct {
	Namespace      string
	ServiceAccount string
	// Secure is true when the stream is TLS and its caller authenticated;
	// nothing is served otherwise.
	Secure bool
}

// Server generates Secret resources and reports their changes.
type Server struct {
	cfg     Config
	log     *slog.Logger
	refused *prometheus.CounterVec
	repeats *repeats

	secrets atomic.Pointer[secretGetter] // nil until the informer has synced

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// New returns a server for cfg. It does no I/O and starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Bundles == nil {
		return nil, errors.New("sds: bundles are required")
	}
	if cfg.Client != nil && cfg.Authorizer == nil {
		return nil, errors.New("sds: an authorizer is required with a Kubernetes client")
	}
	if cfg.MaxSecretSize <= 0 {
		cfg.MaxSecretSize = DefaultMaxSecretSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, subs: map[chan struct{}]struct{}{},
		repeats: newRepeats(refusalLogWindow, refusalLogEntries, time.Now),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_sds_refused_total", Help: "Secret resources asked for and not served, by reason.",
		}, []string{"reason"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.refused); err != nil {
			return nil, fmt.Errorf("sds: register metrics: %w", err)
		}
	}
	return s, nil
}

// Run watches the trust bundle and, with a client, Secrets, and notifies
// subscribers of changes until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	bundles, cancel := s.cfg.Bundles.Subscribe()
	defer cancel()
	if s.cfg.Client != nil {
		factory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				// Token secrets are never credentials and are many.
				o.FieldSelector = fields.OneTermNotEqualSelector("type", string(corev1.SecretTypeServiceAccountToken)).String()
			}))
		inf := factory.Core().V1().Secrets()
		if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { s.notify() },
			UpdateFunc: func(any, any) { s.notify() },
			DeleteFunc: func(any) { s.notify() },
		}); err != nil {
			return fmt.Errorf("sds: watch secrets: %w", err)
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
			return nil // ctx done
		}
		var g secretGetter = listerGetter{inf.Lister()}
		s.secrets.Store(&g)
		s.notify()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-bundles:
			if !ok {
				return nil
			}
			s.notify()
		}
	}
}

// Subscribe returns a channel that receives a value after a change of
// anything served; changes are coalesced. Call cancel to stop.
func (s *Server) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}
}

func (s *Server) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Generate returns the secrets of names that p may have, in the order of
// names. Names it may not have, or that do not exist or are invalid, are
// left out and logged.
func (s *Server) Generate(ctx context.Context, p Proxy, names []string) []*tlsv3.Secret {
	var out []*tlsv3.Secret
	for _, n := range names {
		sec, err := s.generate(ctx, p, n)
		if err != nil {
			reason := reasonOf(err)
			s.refused.WithLabelValues(reason).Inc()
			level := slog.LevelWarn
			if reason == "not_found" || !s.repeats.first(repeatKey{p.Namespace, p.ServiceAccount, n, reason}) {
				level = slog.LevelDebug
			}
			s.log.Log(ctx, level, "secret not served", "name", n, "namespace", p.Namespace,
				"serviceAccount", p.ServiceAccount, "reason", reason, "err", err)
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
	g := s.secrets.Load()
	if g == nil {
		return nil, errNotFound
	}
	for _, cand := range ref.candidates() {
		secret, err := (*g).Get(ref.namespace, cand)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get secret %s/%s: %w", ref.namespace, cand, err)
		}
		allowed, err := s.cfg.Authorizer.CanReadSecret(ctx, ref.namespace, p.ServiceAccount, cand)
		if err != nil {
			return nil, fmt.Errorf("authorize %s/%s: %w", ref.namespace, cand, err)
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

func reasonOf(err error) string {
	switch {
	case errors.Is(err, errPlaintext):
		return "plaintext"
	case errors.Is(err, errCrossNS):
		return "cross_namespace"
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

// listerGetter adapts an informer's lister to secretGetter.
type listerGetter struct{ l corelisters.SecretLister }

func (g listerGetter) Get(namespace, name string) (*corev1.Secret, error) {
	return g.l.Secrets(namespace).Get(name)
}
