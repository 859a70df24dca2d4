// Package catest builds certificate authorities, CSRs and plugged-in CA
// directories for tests.
package catest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// Cert is a certificate with its private key, parsed and in PEM.
type Cert struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte // PKCS#8
}

// Option changes the certificate NewRoot or NewIntermediate makes.
type Option func(*x509.Certificate, *crypto.Signer)

// WithKey makes the certificate for key instead of a new P-256 key.
func WithKey(key crypto.Signer) Option {
	return func(_ *x509.Certificate, k *crypto.Signer) { *k = key }
}

// WithValidity sets NotBefore and NotAfter. The default is an hour ago to
// a year from now, by the wall clock.
func WithValidity(notBefore, notAfter time.Time) Option {
	return func(c *x509.Certificate, _ *crypto.Signer) { c.NotBefore, c.NotAfter = notBefore, notAfter }
}

// WithKeyUsage sets the key usage; the default is certSign|cRLSign.
func WithKeyUsage(ku x509.KeyUsage) Option {
	return func(c *x509.Certificate, _ *crypto.Signer) { c.KeyUsage = ku }
}

// WithExtKeyUsage gives the certificate an extended key usage extension
// listing usages; by default it has none.
func WithExtKeyUsage(usages ...x509.ExtKeyUsage) Option {
	return func(c *x509.Certificate, _ *crypto.Signer) { c.ExtKeyUsage = usages }
}

// WithoutCA marks the certificate as not a CA (basic constraints CA=false).
func WithoutCA() Option {
	return func(c *x509.Certificate, _ *crypto.Signer) { c.IsCA = false }
}

// WithCommonName sets the subject common name.
func WithCommonName(cn string) Option {
	return func(c *x509.Certificate, _ *crypto.Signer) { c.Subject.CommonName = cn }
}

// NewRoot makes a self-signed root CA.
func NewRoot(t testing.TB, opts ...Option) *Cert {
	t.Helper()
	return newCA(t, nil, "Test Root", opts)
}

// NewIntermediate makes a CA certificate signed by parent.
func NewIntermediate(t testing.TB, parent *Cert, opts ...Option) *Cert {
	t.Helper()
	return newCA(t, parent, "Test Intermediate", opts)
}

func newCA(t testing.TB, parent *Cert, cn string, opts []Option) *Cert {
	t.Helper()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{Organization: []string{"bulwark test"}, CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	var key crypto.Signer
	for _, o := range opts {
		o(tmpl, &key)
	}
	if key == nil {
		key = NewKey(t)
	}
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		t.Fatalf("catest: create certificate: %v", err)
	}
	return newCert(t, der, key)
}

func newCert(t testing.TB, der []byte, key crypto.Signer) *Cert {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("catest: parse certificate: %v", err)
	}
	return &Cert{
		Cert:    c,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  KeyPEM(t, key),
	}
}

// NewKey makes a P-256 key.
func NewKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("catest: generate key: %v", err)
	}
	return k
}

// NewECDSAKey makes an ECDSA key on curve.
func NewECDSAKey(t testing.TB, curve elliptic.Curve) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatalf("catest: generate key: %v", err)
	}
	return k
}

// NewRSAKey makes an RSA key of bits bits.
func NewRSAKey(t testing.TB, bits int) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatalf("catest: generate rsa key: %v", err)
	}
	return k
}

// KeyPEM encodes key as PKCS#8 PEM.
func KeyPEM(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("catest: marshal key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		t.Fatalf("catest: serial: %v", err)
	}
	return n.Add(n, big.NewInt(1))
}
