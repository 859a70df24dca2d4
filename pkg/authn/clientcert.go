package authn

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// maxPeerChain bounds the certificates a peer may present (leaf included).
const maxPeerChain = 8

// ClientCert authenticates callers by the X.509-SVID they presented in the
// TLS handshake.
type ClientCert struct {
	td    spiffeid.TrustDomain
	roots func() *x509.CertPool
	clock func() time.Time
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
	return &ClientCert{td: td, roots: roots, clock: clock}
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
	cluster, err := ClusterID(ctx)
	if err != nil {
		return nil, err
	}
	return &Caller{Identities: []spiffeid.ID{id}, Authenticator: KindClientCert, ClusterID: cluster}, nil
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
// SPIFFE ID.
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
	intermediates := x509.NewCertPool()
	for _, cert := range chain[1:] {
		intermediates.AddCert(cert)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   c.clock(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %w: %w", ErrInvalidCertificate, err)
	}
	if len(leaf.URIs) != 1 {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %d URI SANs, want 1: %w", len(leaf.URIs), ErrInvalidIdentity)
	}
	id, err := spiffeid.FromURI(leaf.URIs[0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: URI SAN: %w: %w", ErrInvalidIdentity, err)
	}
	if err := checkWorkloadID(c.td, id); err != nil {
		return spiffeid.ID{}, fmt.Errorf("verify client certificate: %w", err)
	}
	return id, nil
}
