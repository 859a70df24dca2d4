package ca

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/latest"
)

// CA signs workload and serving certificates and owns the trust bundle.
// Create one with New, then Load or Run it.
type CA struct {
	cfg Config
	log *slog.Logger

	auth atomic.Pointer[authority]

	// loadMu serializes loading, reloading and moving a rotation.
	loadMu sync.Mutex
	base   *authority                       // the set loaded, before any rotation
	sets   map[[sha256.Size]byte]*authority // a rotation's sets, parsed

	lastProblem  string // the last reload problem logged, to log each once
	onReloadDone func(error)

	// bundles publishes each signer's bundle; version, under its lock,
	// numbers them.
	bundles latest.Value[*Bundle]
	version uint64

	rot *Rotator // drives root rotation
}

// New checks cfg and fills in defaults. It does no I/O.
func New(cfg Config) (*CA, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new ca: %w", err)
	}
	c := &CA{
		cfg: cfg,
		log: cfg.Logger.With("component", "ca"),
	}
	c.rot = newRotator(c)
	return c, nil
}

// Load loads a signer once: the plugged-in set from CACertsDir if it holds
// one, else the Store's self-signed root, else a new self-signed root saved
// with Store.Create (if another instance saved one first, its root is used).
// An invalid plugged-in set is an error, not a fallback. Once a signer is
// loaded, Load does nothing.
func (c *CA) Load(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if c.auth.Load() != nil {
		return nil
	}
	base, err := c.loadInitial(ctx)
	if err != nil {
		return fmt.Errorf("load ca: %w", err)
	}
	a, err := c.withRotation(ctx, base)
	if err != nil {
		return fmt.Errorf("load ca: %w", err)
	}
	c.base = base
	c.install(a)
	return nil
}

// withRotation is base as the stored rotation state makes it.
func (c *CA) withRotation(ctx context.Context, base *authority) (*authority, error) {
	if c.cfg.Rotations == nil {
		return base, nil
	}
	r, _, err := c.cfg.Rotations.Load(ctx)
	if err != nil {
		return nil, err
	}
	return c.compose(base, r, c.cfg.Clock())
}

func (c *CA) loadInitial(ctx context.Context) (*authority, error) {
	now := c.cfg.Clock()
	if c.cfg.CACertsDir != "" {
		a, found, err := loadPluggedIn(c.cfg.CACertsDir, now)
		if err != nil {
			return nil, err
		}
		if found {
			return a, nil
		}
		c.log.Info("no plugged-in CA; using the self-signed root", "dir", c.cfg.CACertsDir)
	}
	m, err := c.cfg.Store.Load(ctx)
	if errors.Is(err, ErrNotFound) {
		m, err = c.createSelfSigned(ctx, now)
	}
	if err != nil {
		return nil, err
	}
	a, err := newAuthority(m.rawSet(), now, sourceSelfSigned)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return a, nil
}

func (c *CA) createSelfSigned(ctx context.Context, now time.Time) (*KeyMaterial, error) {
	m, err := newSelfSignedMaterial(&c.cfg, now)
	if err != nil {
		return nil, err
	}
	c.log.Info("generated a self-signed root", "key_type", c.cfg.KeyType, "ttl", c.cfg.RootTTL)
	return c.cfg.Store.Create(ctx, m)
}

// install publishes a as the signer with a new bundle version. A key
// installed again after it gave way signs again: its record opens.
func (c *CA) install(a *authority) {
	a.issued.reopen()
	var version uint64
	c.bundles.Update(func(*Bundle, bool) (*Bundle, bool) {
		c.version++
		version = c.version
		a.bundle = newBundle(version, a.trust)
		c.auth.Store(a)
		return a.bundle, true
	})
	c.log.Info("signer loaded", "source", a.source, "subject", a.cert.Subject.String(),
		"not_after", a.cert.NotAfter, "roots", len(a.trust), "bundle_version", version)
}

// Ready reports whether a signer is loaded.
func (c *CA) Ready() bool { return c.auth.Load() != nil }

// Current returns the current trust bundle, or nil before a signer is loaded.
func (c *CA) Current() *Bundle {
	if a := c.auth.Load(); a != nil {
		return a.bundle
	}
	return nil
}

// SigningCert returns the current signing certificate, or nil before a
// signer is loaded. Callers must not modify it.
func (c *CA) SigningCert() *x509.Certificate {
	if a := c.auth.Load(); a != nil {
		return a.cert
	}
	return nil
}
