package catest

import (
	"os"
	"path/filepath"
	"testing"
)

// CACerts is a plugged-in CA set: the signing CA, the intermediates between
// it and the roots (nearest first), and the roots.
type CACerts struct {
	Signing       *Cert
	Intermediates []*Cert
	Roots         []*Cert
}

// Files returns the set in Istio's cacerts layout. cert-chain.pem holds the
// signing certificate, the intermediates and the roots, as Istio's tooling
// writes it.
func (s CACerts) Files() map[string][]byte {
	chain := append([]byte{}, s.Signing.CertPEM...)
	chain = append(chain, certsPEM(s.Intermediates)...)
	chain = append(chain, certsPEM(s.Roots)...)
	return map[string][]byte{
		"ca-cert.pem":    s.Signing.CertPEM,
		"ca-key.pem":     s.Signing.KeyPEM,
		"cert-chain.pem": chain,
		"root-cert.pem":  certsPEM(s.Roots),
	}
}

// TLSFiles returns the set in the Kubernetes TLS layout: tls.crt holds the
// signing certificate followed by the intermediates, ca.crt the roots.
func (s CACerts) TLSFiles() map[string][]byte {
	crt := append([]byte{}, s.Signing.CertPEM...)
	crt = append(crt, certsPEM(s.Intermediates)...)
	return map[string][]byte{
		"tls.crt": crt,
		"tls.key": s.Signing.KeyPEM,
		"ca.crt":  certsPEM(s.Roots),
	}
}

// WriteCACerts writes s into dir in Istio's layout.
func WriteCACerts(t testing.TB, dir string, s CACerts) {
	t.Helper()
	WriteFiles(t, dir, s.Files())
}

// WriteTLSCACerts writes s into dir in the TLS layout.
func WriteTLSCACerts(t testing.TB, dir string, s CACerts) {
	t.Helper()
	WriteFiles(t, dir, s.TLSFiles())
}

// WriteFiles creates dir if needed and writes each file through a temporary
// file and a rename, so a reader never sees a file half-written.
func WriteFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("catest: %v", err)
	}
	for name, data := range files {
		tmp := filepath.Join(dir, ".tmp-"+name)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatalf("catest: %v", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatalf("catest: %v", err)
		}
	}
}

func certsPEM(certs []*Cert) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, c.CertPEM...)
	}
	return out
}
