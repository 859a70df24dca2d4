package ca

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// SignRequest asks for a certificate. Identities become URI SANs (exactly
// one for a workload certificate); DNSNames are for istiod's own serving
// certificate. The caller has authenticated and authorized both.
type SignRequest struct {
	PublicKey  crypto.PublicKey
	Identities []spiffeid.ID
	DNSNames   []string
	// TTL is the requested lifetime: <= 0 means Config.DefaultTTL, above
	// Config.MaxTTL is ErrInvalidTTL.
	TTL time.Duration
}

// Issued is a signed certificate with the chain to return to the caller.
type Issued struct {
	Leaf *x509.Certificate
	// Chain is in Istio's order: the leaf, each intermediate, then all roots
	// concatenated as one last element. It has at least two elements.
	Chain []string
}

// Sign makes a certificate for req with the current signer, and checks that
// it chains to the current roots and is exactly what was asked before
// returning it. While the signer gives way to another (issuance.go), Sign
// waits for the change and signs with the signer that follows.
func (c *CA) Sign(req SignRequest) (*Issued, error) {
	if c.auth.Load() == nil {
		return nil, fmt.Errorf("sign: %w", ErrNotReady)
	}
	ttl, uris, err := c.checkRequest(req)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	for {
		a := c.auth.Load()
		now := c.cfg.Clock()
		tmpl, err := c.template(a, req, ttl, uris, now)
		if err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		// What workloads hold keeps the old root trusted through a
		// rotation, so its expiry is recorded before it is signed;
		// istiod's own serving certificate (DNS names only) does not, as
		// the new key re-issues it on activation.
		if wait := a.issued.admit(tmpl.NotAfter, len(req.Identities) > 0); wait != nil {
			<-wait
			continue
		}
		iss, err := a.signLeaf(tmpl, req.PublicKey, now)
		if err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		return iss, nil
	}
}

// template is the leaf a signs for req at now: valid for ttl within the
// chain's validity, to the second, as the certificate encodes it.
func (c *CA) template(a *authority, req SignRequest, ttl time.Duration, uris []*url.URL, now time.Time) (*x509.Certificate, error) {
	if now.Before(a.notBefore) || now.After(a.notAfter) {
		return nil, fmt.Errorf("%w: valid %s to %s", ErrSignerExpired,
			a.notBefore.UTC().Format(time.RFC3339), a.notAfter.UTC().Format(time.RFC3339))
	}
	return &x509.Certificate{
		SerialNumber:          newSerial(),
		NotBefore:             later(now.Add(-c.cfg.Backdate), a.notBefore),
		NotAfter:              earlier(now.Add(ttl), a.notAfter).Truncate(time.Second),
		URIs:                  uris,
		DNSNames:              req.DNSNames,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        a.cert.SubjectKeyId,
	}, nil
}

// checkRequest applies the signing policy to req and returns the lifetime
// and URI SANs to sign.
func (c *CA) checkRequest(req SignRequest) (time.Duration, []*url.URL, error) {
	ttl, err := c.ttl(req.TTL)
	if err != nil {
		return 0, nil, err
	}
	if err := checkPublicKey(req.PublicKey); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	uris, err := c.uriSANs(req.Identities)
	if err != nil {
		return 0, nil, err
	}
	if len(uris) == 0 && len(req.DNSNames) == 0 {
		return 0, nil, fmt.Errorf("%w: no identity or DNS name", ErrInvalidCSR)
	}
	for _, n := range req.DNSNames {
		if n == "" || len(n) > 253 {
			return 0, nil, fmt.Errorf("%w: DNS name %q", ErrInvalidCSR, n)
		}
	}
	return ttl, uris, nil
}

// signLeaf signs tmpl for pub, checks the result (leafcheck.go) and returns
// it with the chain in Istio's order.
func (a *authority) signLeaf(tmpl *x509.Certificate, pub crypto.PublicKey, now time.Time) (*Issued, error) {
	der, err := a.createLeaf(tmpl, pub)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse signed certificate: %w", err)
	}
	if err := a.checkLeaf(leaf, leafWant{tmpl: tmpl, pub: pub}); err != nil {
		return nil, err
	}
	if a.verifyEach {
		if err := a.verifyToRoots(leaf, now); err != nil {
			return nil, fmt.Errorf("verify signed certificate: %w", err)
		}
	}
	chain := make([]string, 0, len(a.chainPEM)+2)
	chain = append(chain, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	chain = append(chain, a.chainPEM...)
	chain = append(chain, a.rootsPEM)
	return &Issued{Leaf: leaf, Chain: chain}, nil
}

func (c *CA) ttl(d time.Duration) (time.Duration, error) {
	switch {
	case d <= 0:
		return c.cfg.DefaultTTL, nil
	case d > c.cfg.MaxTTL:
		return 0, fmt.Errorf("%w: %s is above the maximum %s", ErrInvalidTTL, d, c.cfg.MaxTTL)
	}
	return d, nil
}

// uriSANs checks the requested identities: at most one, and in the CA's
// trust domain.
func (c *CA) uriSANs(ids []spiffeid.ID) ([]*url.URL, error) {
	switch {
	case len(ids) == 0:
		return nil, nil
	case len(ids) > 1:
		return nil, fmt.Errorf("%w: %d identities; a certificate carries one", ErrInvalidCSR, len(ids))
	case ids[0].IsZero():
		return nil, fmt.Errorf("%w: empty identity", ErrInvalidCSR)
	case ids[0].TrustDomain() != c.cfg.TrustDomain:
		return nil, fmt.Errorf("%w: %s is outside trust domain %s", ErrIdentityNotAllowed, ids[0], c.cfg.TrustDomain)
	}
	return []*url.URL{ids[0].URL()}, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
