// Package service serves Istio's CSR API,
// istio.v1.auth.IstioCertificateService/CreateCertificate, on top of the CA.
package service

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// Signer signs an authorized request.
type Signer interface {
	Sign(req ca.SignRequest) (*ca.Issued, error)
}

// Config configures the CSR service.
type Config struct {
	Authenticator authn.Authenticator
	Signer        Signer
	Metrics       *Metrics
	Logger        *slog.Logger
	// RateLimit is the sustained number of CSRs per second the service
	// accepts; requests beyond it and Burst get ResourceExhausted.
	RateLimit float64
	Burst     int
	Clock     func() time.Time
}

// Service implements IstioCertificateService.
type Service struct {
	pb.UnsafeIstioCertificateServiceServer

	authn   authn.Authenticator
	signer  Signer
	metrics *Metrics
	log     *slog.Logger
	limiter *rate.Limiter
	now     func() time.Time
}

var _ pb.IstioCertificateServiceServer = (*Service)(nil)

// New returns the service. It does no I/O.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	limit := rate.Limit(cfg.RateLimit)
	if cfg.RateLimit <= 0 {
		limit = rate.Inf
	}
	return &Service{
		authn:   cfg.Authenticator,
		signer:  cfg.Signer,
		metrics: cfg.Metrics,
		log:     cfg.Logger,
		limiter: rate.NewLimiter(limit, max(cfg.Burst, 1)),
		now:     cfg.Clock,
	}
}

// Register registers the service with a gRPC server.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	pb.RegisterIstioCertificateServiceServer(r, s)
}

// CreateCertificate authenticates the caller, checks the CSR against the
// caller's identity and returns the signed chain in Istio's order.
func (s *Service) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	if !s.limiter.Allow() {
		s.metrics.rateLimited.Inc()
		return nil, status.Error(codes.ResourceExhausted, "too many certificate requests, retry later")
	}
	s.metrics.csrs.Inc()

	caller, err := s.authn.Authenticate(ctx)
	if err != nil {
		return nil, s.refuseUnauthenticated(ctx, err)
	}

	start := s.now()
	issued, err := s.sign(req, caller)
	if err != nil {
		code, msg := s.classify(err)
		s.log.Warn("csr refused", "peer", peerAddr(ctx), "authenticator", caller.Authenticator,
			"identities", caller.Identities, "code", code.String(), "error", err)
		return nil, status.Error(code, msg)
	}
	s.metrics.signLatency.Observe(s.now().Sub(start).Seconds())
	s.metrics.issued.Inc()
	s.metrics.issuedByCluster.WithLabelValues(caller.ClusterID).Inc()
	s.logIssued(ctx, caller, issued)
	return &pb.IstioCertificateResponse{CertChain: issued.Chain}, nil
}

// logIssued records the issued certificate, one line per certificate. The
// attributes are gathered for that line alone: deriving a logger with
// With for every request costs more than the line.
func (s *Service) logIssued(ctx context.Context, caller *authn.Caller, issued *ca.Issued) {
	if !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("peer", peerAddr(ctx)),
		slog.String("authenticator", caller.Authenticator),
		slog.String("identity", issued.Leaf.URIs[0].String()),
		slog.String("serial", issued.Leaf.SerialNumber.Text(16)),
		slog.String("not_after", issued.Leaf.NotAfter.UTC().Format(time.RFC3339)),
	)
	if caller.Pod != nil {
		attrs = append(attrs, slog.String("pod", caller.Pod.Name), slog.String("pod_uid", caller.Pod.UID))
	}
	// The cluster that authenticated the caller, never the one it claimed.
	if caller.ClusterID != "" {
		attrs = append(attrs, slog.String("cluster", caller.ClusterID))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "certificate issued", attrs...)
}

// sign parses and checks the CSR for this caller and signs it.
func (s *Service) sign(req *pb.IstioCertificateRequest, caller *authn.Caller) (*ca.Issued, error) {
	csr, err := ca.ParseCSR([]byte(req.GetCsr()))
	if err != nil {
		return nil, fmt.Errorf("parse csr: %w", err)
	}
	if err := ca.CheckCSR(csr, caller.Identities); err != nil {
		return nil, fmt.Errorf("check csr: %w", err)
	}
	id, err := identityFor(csr, caller)
	if err != nil {
		return nil, err
	}
	issued, err := s.signer.Sign(ca.SignRequest{
		PublicKey:  csr.PublicKey,
		Identities: []spiffeid.ID{id},
		TTL:        ttlFromSeconds(req.GetValidityDuration()),
	})
	if err != nil {
		return nil, fmt.Errorf("sign csr: %w", err)
	}
	return issued, nil
}

// identityFor picks the certificate's one identity: the one the CSR asks for
// (CheckCSR has already ensured it belongs to the caller), else the caller's.
func identityFor(csr *x509.CertificateRequest, caller *authn.Caller) (spiffeid.ID, error) {
	if len(csr.URIs) > 1 {
		return spiffeid.ID{}, fmt.Errorf("csr asks for %d identities, at most one is issued: %w", len(csr.URIs), ca.ErrInvalidCSR)
	}
	if len(csr.URIs) == 1 {
		id, err := spiffeid.FromURI(csr.URIs[0])
		if err != nil {
			return spiffeid.ID{}, fmt.Errorf("csr identity: %w: %w", ca.ErrInvalidCSR, err)
		}
		return id, nil
	}
	if len(caller.Identities) == 0 {
		return spiffeid.ID{}, fmt.Errorf("caller has no identity: %w", ca.ErrIdentityNotAllowed)
	}
	return caller.Identities[0], nil
}

// ttlFromSeconds converts the request's validity in seconds without
// overflowing: anything beyond what a Duration holds becomes the largest
// Duration, which the CA then refuses as above its maximum.
func ttlFromSeconds(secs int64) time.Duration {
	if secs > int64(math.MaxInt64/time.Second) {
		return math.MaxInt64
	}
	return time.Duration(secs) * time.Second
}

// refuseUnauthenticated answers a request whose caller could not be
// authenticated. When a credential could not be judged because its backend
// (the API server's TokenReview, an OIDC issuer) is unreachable, the answer
// is Unavailable, which agents retry: a PermissionDenied or Unauthenticated
// would tell them the credential itself is bad. That case is logged at debug
// level only, since an outage would otherwise log one line per request; the
// API server monitor says once that it is unreachable.
func (s *Service) refuseUnauthenticated(ctx context.Context, err error) error {
	s.metrics.authnFailures.Inc()
	if errors.Is(err, authn.ErrUnavailable) {
		s.metrics.authnUnavailable.Inc()
		s.log.Debug("csr refused: authentication backend unavailable", "peer", peerAddr(ctx), "error", err)
		return status.Error(codes.Unavailable, "authentication backend unavailable, retry later")
	}
	s.log.Warn("csr refused: authentication failed", "peer", peerAddr(ctx), "error", err)
	return status.Error(codes.Unauthenticated, "authentication failed")
}

// classify maps an error to the opaque gRPC answer the client gets and
// counts it. The detail stays in the log.
func (s *Service) classify(err error) (codes.Code, string) {
	switch {
	case errors.Is(err, ca.ErrIdentityNotAllowed):
		s.metrics.parseErrors.Inc()
		return codes.PermissionDenied, "csr identity not allowed for caller"
	case errors.Is(err, ca.ErrInvalidCSR):
		s.metrics.parseErrors.Inc()
		return codes.InvalidArgument, "invalid csr"
	case errors.Is(err, ca.ErrInvalidTTL):
		s.metrics.signErrors.WithLabelValues("ttl").Inc()
		return codes.InvalidArgument, "requested validity exceeds the maximum"
	case errors.Is(err, ca.ErrNotReady):
		s.metrics.signErrors.WithLabelValues("not_ready").Inc()
		return codes.Unavailable, "ca not ready"
	default:
		s.metrics.signErrors.WithLabelValues("internal").Inc()
		return codes.Internal, "failed to sign certificate"
	}
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
