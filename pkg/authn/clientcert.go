package authn

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// maxPeerChain bounds the certificates a peer may present (leaf included).
const maxPeerChain = 8

// verifiedCacheSize bounds the remembered verifications. Every agent keeps
// one certificate per connection, so this covers many thousands of agents.
const verifiedCacheSize = 16384

// ClientCert authenticates callers by the X.509-SVID they presented in the
// TLS handshake.
type ClientCert struct {
	td    spiffeid.TrustDomain
	roots func() *x509.CertPool
	clock func() time.Time
	// verified remembers chains already verified against a trust bundle, so
	// an agent's repeated requests on one connection cost no signature check.
	verified *expiringCache[verification]
}

// verification is a chain verified against one trust bundle, valid from
// notBefore until the cache entry's expiry (the chain's earliest NotAfter).
type verification struct {
	roots     *x509.CertPool
	notBefore time.Time
	id        spiffeid.ID
}

var _ Authenticator = (*ClientCert)(nil)

// NewClientCert returns an authenticator accepting client certificates that
// chain to roots() at clock() and name one SPIFFE ID
// spiffe://<td>/ns/<namespace>/sa/<name>. roots is called on every request,
// so a rotated trust bundle applies to connections made before the rotation.
// A nil clock means time.Now.
func NewClientCert(td spiffeid.TrustDomain, roots func() *x509.CertPool, clock func() time.Time) *ClientCert {
	if clock == nil {
		clock = time.Now
	}
	return &ClientCert{td: td, roots: roots, clock: clock, verified: newExpiringCache[verification](verifiedCacheSize)}
}

// Kind implements Authenticator.
func (*ClientCert) Kind() string { return KindClientCert }

// Authenticate implements Authenticator.
func (c *ClientCert) Authenticate(ctx context.Context) (*Caller, error) {
	chain, err := peerChain(ctx)
	if err != nil {
		return nil, err
	}
	id, err := c.verify(chain)
	if err != nil {
		return nil, err
	}
	// The claimed cluster is read for its limits only: a certificate caller
	// is bound to istiod's own cluster, whatever it claims.
	if _, err := ClusterID(ctx); err != nil {
		return nil, err
	}
	return &Caller{Identities: []spiffeid.ID{id}, Authenticator: KindClientCert}, nil
}

// peerChain returns the certificates the TLS peer in ctx presented, leaf
// first, or ErrNoCredentials.
func peerChain(ctx context.Context) ([]*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil, ErrNoCredentials
	}
	var state credentials.TLSInfo
	switch info := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		state = info
	case *credentials.TLSInfo:
		state = *info
	default:
		return nil, ErrNoCredentials
	}
	if len(state.State.PeerCertificates) == 0 {
		return nil, ErrNoCredentials
	}
	return state.State.PeerCertificates, nil
}

// verify checks the chain against the current roots and returns the leaf's
// SPIFFE ID. A chain verified before against the same trust bundle, and
// still within its validity, is not verified again.
func (c *ClientCert) verify(chain []*x509.Certificate) (spiffeid.ID, error) {
	if len(chain) > maxPeerChain {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %d certificates presented, limit %d: %w", len(chain), maxPeerChain, ErrInvalidCertificate)
	}
	leaf := chain[0]
	if leaf.IsCA {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %q is a CA certificate: %w", leaf.Subject, ErrInvalidCertificate)
	}
	var roots *x509.CertPool
	if c.roots != nil {
		roots = c.roots()
	}
	if roots == nil {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: no trust bundle: %w", ErrInvalidCertificate)
	}
	now := c.clock()
	key := chainKey(chain)
	if v, ok := c.verified.get(key, now); ok && v.roots == roots && !now.Before(v.notBefore) {
		return v.id, nil
	}
	intermediates := x509.NewCertPool()
	for _, cert := range chain[1:] {
		intermediates.AddCert(cert)
	}
	verifiedChains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %w: %w", ErrInvalidCertificate, err)
	}
	id, err := leafIdentity(c.td, leaf)
	if err != nil {
		return spiffeid.ID{}, err
	}
	notBefore, notAfter := validity(verifiedChains[0])
	c.verified.put(key, verification{roots: roots, notBefore: notBefore, id: id}, notAfter)
	return id, nil
}

// leafIdentity is the one SPIFFE ID a workload certificate names.
func leafIdentity(td spiffeid.TrustDomain, leaf *x509.Certificate) (spiffeid.ID, error) {
	if len(leaf.URIs) != 1 {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %d URI SANs, want 1: %w", len(leaf.URIs), ErrInvalidIdentity)
	}
	id, err := spiffeid.FromURI(leaf.URIs[0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: URI SAN: %w: %w", ErrInvalidIdentity, err)
	}
	if err := checkWorkloadID(td, id); err != nil {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %w", err)
	}
	return id, nil
}

// chainKey identifies a presented chain by the hash of its certificates.
func chainKey(chain []*x509.Certificate) [32]byte {
	h := sha256.New()
	for _, c := range chain {
		h.Write(c.Raw)
	}
	var key [32]byte
	h.Sum(key[:0])
	return key
}

// validity is the window in which every certificate of chain is valid.
func validity(chain []*x509.Certificate) (notBefore, notAfter time.Time) {
	notBefore, notAfter = chain[0].NotBefore, chain[0].NotAfter
	for _, c := range chain[1:] {
		if c.NotBefore.After(notBefore) {
			notBefore = c.NotBefore
		}
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	return notBefore, notAfter
}
