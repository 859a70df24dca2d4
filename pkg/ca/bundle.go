package ca

import (
	"crypto/x509"
	"encoding/pem"
	"sync"
)

// Bundle is an immutable snapshot of the trust bundle: the root certificates
// workloads trust. It may hold several roots, e.g. while a root rotates.
// Version grows by one with every change of the CA's signer.
type Bundle struct {
	Version uint64
	Roots   []*x509.Certificate
	PEM     []byte // the roots, PEM-encoded and concatenated

	poolOnce sync.Once
	pool     *x509.CertPool
}

func newBundle(version uint64, roots []*x509.Certificate) *Bundle {
	b := &Bundle{Version: version, Roots: roots, PEM: encodeCerts(roots)}
	b.Pool()
	return b
}

// Pool returns the roots as a pool. It is built once and shared: callers must
// not add to it.
func (b *Bundle) Pool() *x509.CertPool {
	b.poolOnce.Do(func() {
		b.pool = x509.NewCertPool()
		for _, c := range b.Roots {
			b.pool.AddCert(c)
		}
	})
	return b.pool
}

func encodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, encodeCert(c)...)
	}
	return out
}
