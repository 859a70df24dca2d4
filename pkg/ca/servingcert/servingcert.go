// Package servingcert keeps istiod's own TLS serving certificate, issued by
// its CA for its DNS names and renewed before it expires or when the CA's
// signer changes, without a restart.
package servingcert

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// Issuer signs the serving certificate.
type Issuer interface {
	Sign(req ca.SignRequest) (*ca.Issued, error)
}

// Bundles announces trust-bundle changes, which follow a change of signer.
type Bundles interface {
	Subscribe() (<-chan *ca.Bundle, func())
}

// Config configures the rotator.
type Config struct {
	Issuer   Issuer
	Bundles  Bundles
	DNSNames []string
	// TTL of each serving certificate; renewed at RenewAt of its lifetime.
	TTL     time.Duration
	RenewAt float64
	// RetryInterval is the wait after a failed issuance.
	RetryInterval time.Duration
	KeyType       ca.KeyType
	Clock         func() time.Time
	Logger        *slog.Logger
}

// Rotator holds the current serving certificate.
type Rotator struct {
	cfg     Config
	current atomic.Pointer[tls.Certificate]
	ready   chan struct{}
	once    atomic.Bool
}

// ErrNoCertificate is returned by GetCertificate before the first issuance.
var ErrNoCertificate = errors.New("serving certificate not issued yet")

// New returns a rotator. It does no I/O.
func New(cfg Config) (*Rotator, error) {
	if cfg.Issuer == nil || cfg.Bundles == nil {
		return nil, errors.New("servingcert: issuer and bundles are required")
	}
	if len(cfg.DNSNames) == 0 {
		return nil, errors.New("servingcert: at least one DNS name is required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.RenewAt <= 0 || cfg.RenewAt >= 1 {
		cfg.RenewAt = 0.5
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 5 * time.Second
	}
	if cfg.KeyType == "" {
		cfg.KeyType = ca.KeyTypeECDSAP256
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Rotator{cfg: cfg, ready: make(chan struct{})}, nil
}

// Ready is closed once the first certificate is issued.
func (r *Rotator) Ready() <-chan struct{} { return r.ready }

// GetCertificate serves the current certificate to TLS handshakes.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.current.Load(); c != nil {
		return c, nil
	}
	return nil, ErrNoCertificate
}

// Run issues the certificate as soon as the CA has a bundle, then renews it
// at RenewAt of its lifetime and whenever the bundle changes.
func (r *Rotator) Run(ctx context.Context) error {
	updates, cancel := r.cfg.Bundles.Subscribe()
	defer cancel()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-updates:
			if !ok {
				return nil
			}
		case <-timer.C:
		}
		next, err := r.rotate()
		if err != nil {
			r.cfg.Logger.Error("serving certificate not renewed, retrying", "error", err, "retry_in", r.cfg.RetryInterval)
			next = r.cfg.RetryInterval
		}
		timer.Reset(next)
	}
}

// rotate issues a new certificate and returns the wait until the next one.
func (r *Rotator) rotate() (time.Duration, error) {
	key, err := ca.GenerateKey(r.cfg.KeyType)
	if err != nil {
		return 0, fmt.Errorf("generate serving key: %w", err)
	}
	issued, err := r.cfg.Issuer.Sign(ca.SignRequest{
		PublicKey: key.Public(),
		DNSNames:  r.cfg.DNSNames,
		TTL:       r.cfg.TTL,
	})
	if err != nil {
		return 0, fmt.Errorf("issue serving certificate: %w", err)
	}
	cert := &tls.Certificate{PrivateKey: key, Leaf: issued.Leaf}
	// Serve the leaf and its intermediates; the roots (last element) are
	// what the client already trusts.
	for _, p := range issued.Chain[:len(issued.Chain)-1] {
		block, _ := pem.Decode([]byte(p))
		if block == nil {
			return 0, errors.New("issue serving certificate: chain element is not PEM")
		}
		cert.Certificate = append(cert.Certificate, block.Bytes)
	}
	r.current.Store(cert)
	if r.once.CompareAndSwap(false, true) {
		close(r.ready)
	}
	lifetime := issued.Leaf.NotAfter.Sub(issued.Leaf.NotBefore)
	renewAt := issued.Leaf.NotBefore.Add(time.Duration(float64(lifetime) * r.cfg.RenewAt))
	wait := max(renewAt.Sub(r.cfg.Clock()), r.cfg.RetryInterval)
	r.cfg.Logger.Info("serving certificate issued",
		"dns_names", r.cfg.DNSNames, "serial", issued.Leaf.SerialNumber.Text(16),
		"not_after", issued.Leaf.NotAfter.UTC().Format(time.RFC3339), "renew_in", wait.Round(time.Second))
	return wait, nil
}
