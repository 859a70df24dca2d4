package catest

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"testing"
)

// CSR makes a PEM certificate request signed by key with the given URI SANs.
func CSR(t testing.TB, key crypto.Signer, uris ...string) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("catest: parse uri %q: %v", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return CSRFromTemplate(t, key, tmpl)
}

// CSRFromTemplate makes a PEM certificate request from tmpl signed by key.
func CSRFromTemplate(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatalf("catest: create csr: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
