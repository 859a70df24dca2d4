package ca

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
)

// SigningKey is where the key that signs is kept, as the stored state
// has it: what istiod ca status shows an operator who backs the CA up or
// starts it over.
type SigningKey struct {
	// Where names what holds the key: the plugged-in directory, the Store
	// (istio-ca-secret), or the RotationStore (istio-ca-rotation) and
	// which of its sets. Empty when there is no key yet: the first istiod
	// to start makes one in the Store.
	Where string
	// Phase is the phase of the rotation under way, PhaseIdle for none.
	Phase Phase
	// Cert is the signing certificate and Root the first root of its set;
	// nil when there is no key yet.
	Cert, Root *x509.Certificate
	// PluggedInDir is the directory read for a plugged-in set, "" for none.
	PluggedInDir string
}

// KeyID is the signing key's fingerprint: the hex SHA-256 of its public
// key (SubjectPublicKeyInfo), the same however its certificates change.
func (k *SigningKey) KeyID() string {
	if k.Cert == nil {
		return ""
	}
	sum := sha256.Sum256(k.Cert.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// SigningKey reads where the key that signs is kept, as a CA started now
// on the stored state would find it. It reads the plugged-in directory,
// the Store and the RotationStore, and writes nothing: unlike Load, it
// makes no first root.
func (c *CA) SigningKey(ctx context.Context) (*SigningKey, error) {
	var pluggedIn rawSet
	found := false
	if c.cfg.CACertsDir != "" {
		var err error
		if pluggedIn, found, err = readCACerts(c.cfg.CACertsDir); err != nil {
			return nil, fmt.Errorf("signing key: %w", err)
		}
	}
	return c.signingKey(ctx, pluggedIn, found, "the plugged-in set in "+c.cfg.CACertsDir)
}

// SigningKeyOf is SigningKey with the plugged-in set given as the files of
// the Secret istiod mounts at CACertsDir (cacerts), by file name, as read
// from outside the cluster; nil or empty means no plugged-in set. Unlike
// SigningKey it checks the plugged-in set as istiod would load it, so a set
// istiod would refuse is an error here too.
func (c *CA) SigningKeyOf(ctx context.Context, cacerts map[string][]byte, where string) (*SigningKey, error) {
	pluggedIn, found, err := pickSet(cacerts)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	if found {
		if _, err := newAuthority(pluggedIn, c.cfg.Clock(), sourcePluggedIn); err != nil {
			return nil, fmt.Errorf("signing key: cacerts: %w", err)
		}
	}
	return c.signingKey(ctx, pluggedIn, found, "the plugged-in set in "+where)
}

func (c *CA) signingKey(ctx context.Context, pluggedIn rawSet, found bool, pluggedInWhere string) (*SigningKey, error) {
	var r *Rotation
	if c.cfg.Rotations != nil {
		var err error
		if r, _, err = c.cfg.Rotations.Load(ctx); err != nil {
			return nil, fmt.Errorf("signing key: %w", err)
		}
	}
	k := &SigningKey{Phase: PhaseIdle, PluggedInDir: c.cfg.CACertsDir}
	if r != nil {
		k.Phase = r.Phase
	}
	m, which := signingSet(r, found)
	switch {
	case m != nil:
		k.Where = fmt.Sprintf("%s, the %s set", describe(c.cfg.Rotations, "the rotation state"), which)
		return k, k.parse(m.rawSet())
	case found:
		k.Where = pluggedInWhere
		return k, k.parse(pluggedIn)
	}
	stored, err := c.cfg.Store.Load(ctx)
	if errors.Is(err, ErrNotFound) {
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	k.Where = describe(c.cfg.Store, "the store")
	return k, k.parse(stored.rawSet())
}

// signingSet is the set of the rotation state r that signs, with which
// ("old", "new") it is, or nil when the set loaded signs: the plugged-in
// one (pluggedIn) or else the Store's. It is the choice compose makes.
func signingSet(r *Rotation, pluggedIn bool) (*KeyMaterial, string) {
	switch {
	case r == nil:
		return nil, ""
	case r.Phase == PhasePrepare && r.Old != nil:
		return r.Old, "old"
	case r.Phase == PhaseActivate && r.New != nil:
		return r.New, "new"
	case r.Phase == PhaseIdle && r.New != nil && !pluggedIn:
		return r.New, "new"
	}
	return nil, ""
}

func (k *SigningKey) parse(set rawSet) error {
	certs, err := parseCerts(set.cert)
	if err != nil {
		return fmt.Errorf("signing key in %s: %w", k.Where, fileErr(set.files.cert, err))
	}
	roots, err := parseCerts(set.roots)
	if err != nil {
		return fmt.Errorf("signing key in %s: %w", k.Where, fileErr(set.files.roots, err))
	}
	k.Cert, k.Root = certs[0], roots[0]
	return nil
}

// describe is v's String, for a store that names where it keeps things,
// else fallback.
func describe(v any, fallback string) string {
	if s, ok := v.(fmt.Stringer); ok {
		return s.String()
	}
	return fallback
}
