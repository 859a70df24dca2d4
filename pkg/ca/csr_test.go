package ca

import (
	"bytes"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

const (
	fooURI = "spiffe://cluster.local/ns/foo/sa/app"
	barURI = "spiffe://cluster.local/ns/bar/sa/app"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// csrWithExtension makes a CSR for fooURI that also requests ext.
func csrWithExtension(t *testing.T, id asn1.ObjectIdentifier, value any) []byte {
	t.Helper()
	v, err := asn1.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	return catest.CSRFromTemplate(t, catest.NewKey(t), &x509.CertificateRequest{
		URIs:            []*url.URL{mustURL(t, fooURI)},
		ExtraExtensions: []pkix.Extension{{Id: id, Value: v}},
	})
}

func keyUsageBits(bits ...int) asn1.BitString {
	b := asn1.BitString{Bytes: make([]byte, 2), BitLength: 9}
	for _, n := range bits {
		b.Bytes[n/8] |= 0x80 >> (n % 8)
	}
	return b
}

// badSignature returns a well-formed CSR whose signature does not match:
// the last byte of the DER is the last byte of the signature.
func badSignature(t *testing.T) []byte {
	t.Helper()
	der := bytes.Clone(mustDER(t, catest.CSR(t, catest.NewKey(t), fooURI)))
	der[len(der)-1] ^= 0xff
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestCSRPolicy(t *testing.T) {
	foo := spiffeid.RequireFromString(fooURI)
	valid := catest.CSR(t, catest.NewKey(t), fooURI)
	rsa16k := readRSA16384CSR(t)
	cert := catest.NewRoot(t)

	tests := map[string]struct {
		pem     []byte
		allowed []spiffeid.ID
		want    error
	}{
		"a P-256 request for the caller's own identity is accepted": {pem: valid, allowed: []spiffeid.ID{foo}},
		"a P-384 request is accepted": {
			pem: catest.CSR(t, catest.NewECDSAKey(t, elliptic.P384()), fooURI), allowed: []spiffeid.ID{foo}},
		"an RSA-2048 request is accepted":        {pem: catest.CSR(t, rsa2048(), fooURI), allowed: []spiffeid.ID{foo}},
		"a request without URI SANs is accepted": {pem: catest.CSR(t, catest.NewKey(t))},
		"a NEW CERTIFICATE REQUEST block is accepted": {
			pem: bytes.Replace(valid, []byte("CERTIFICATE REQUEST"), []byte("NEW CERTIFICATE REQUEST"), 2), allowed: []spiffeid.ID{foo}},
		"surrounding whitespace is accepted": {pem: append(append([]byte("\n \t"), valid...), "\r\n\n"...), allowed: []spiffeid.ID{foo}},
		"a request whose subject names someone else is accepted, the subject being ignored": {
			pem: catest.CSRFromTemplate(t, catest.NewKey(t), &x509.CertificateRequest{
				Subject: pkix.Name{CommonName: "admin", Organization: []string{"root"}},
				URIs:    []*url.URL{mustURL(t, fooURI)},
			}), allowed: []spiffeid.ID{foo}},
		"basic constraints with CA false are accepted": {
			pem: csrWithExtension(t, oidBasicConstraints, struct{}{}), allowed: []spiffeid.ID{foo}},
		"the digitalSignature key usage is accepted": {
			pem: csrWithExtension(t, oidKeyUsage, keyUsageBits(0, 2)), allowed: []spiffeid.ID{foo}},

		"empty input is refused":   {pem: nil, want: ErrInvalidCSR},
		"garbage is refused":       {pem: []byte("hello, world"), want: ErrInvalidCSR},
		"truncated PEM is refused": {pem: valid[:len(valid)/2], want: ErrInvalidCSR},
		"a PEM block of garbage is refused": {
			pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("junk")}), want: ErrInvalidCSR},
		"two PEM blocks are refused": {pem: append(append([]byte{}, valid...), valid...), want: ErrInvalidCSR},
		"trailing data is refused":   {pem: append(append([]byte{}, valid...), "trailer"...), want: ErrInvalidCSR},
		"leading data is refused":    {pem: append([]byte("leader\n"), valid...), want: ErrInvalidCSR},
		"a CERTIFICATE is refused":   {pem: cert.CertPEM, want: ErrInvalidCSR},
		"PEM headers are refused": {
			pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Headers: map[string]string{"X": "y"},
				Bytes: mustDER(t, valid)}), want: ErrInvalidCSR},
		"input above 32 KiB is refused": {
			pem: append(append([]byte{}, valid...), strings.Repeat(" ", MaxCSRSize)...), want: ErrInvalidCSR},
		"a bad self-signature is refused": {pem: badSignature(t), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"an RSA-1024 key is refused":      {pem: catest.CSR(t, catest.NewRSAKey(t, 1024), fooURI), want: ErrInvalidCSR},
		"an RSA-16384 key is refused":     {pem: rsa16k, want: ErrInvalidCSR},
		"a P-224 key is refused":          {pem: catest.CSR(t, catest.NewECDSAKey(t, elliptic.P224()), fooURI), want: ErrInvalidCSR},
		"a P-521 key is refused":          {pem: catest.CSR(t, catest.NewECDSAKey(t, elliptic.P521()), fooURI), want: ErrInvalidCSR},
		"an Ed25519 key is refused":       {pem: catest.CSR(t, newEd25519(t), fooURI), want: ErrInvalidCSR},
		"an extra DNS SAN is refused": {
			pem: catest.CSRFromTemplate(t, catest.NewKey(t), &x509.CertificateRequest{
				URIs: []*url.URL{mustURL(t, fooURI)}, DNSNames: []string{"kubernetes.default.svc"},
			}), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"an IP SAN is refused": {
			pem: catest.CSRFromTemplate(t, catest.NewKey(t), &x509.CertificateRequest{
				IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)},
			}), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"an email SAN is refused": {
			pem: catest.CSRFromTemplate(t, catest.NewKey(t), &x509.CertificateRequest{
				EmailAddresses: []string{"root@example.com"},
			}), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"another namespace's identity is refused": {
			pem: catest.CSR(t, catest.NewKey(t), barURI), allowed: []spiffeid.ID{foo}, want: ErrIdentityNotAllowed},
		"an allowed identity next to a foreign one is refused": {
			pem: catest.CSR(t, catest.NewKey(t), fooURI, barURI), allowed: []spiffeid.ID{foo}, want: ErrIdentityNotAllowed},
		"an identity with nothing allowed is refused": {
			pem: catest.CSR(t, catest.NewKey(t), fooURI), want: ErrIdentityNotAllowed},
		"another trust domain's identity is refused": {
			pem: catest.CSR(t, catest.NewKey(t), "spiffe://evil.example/ns/foo/sa/app"), allowed: []spiffeid.ID{foo}, want: ErrIdentityNotAllowed},
		"a URI SAN that is not a SPIFFE ID is refused": {
			pem: catest.CSR(t, catest.NewKey(t), "https://cluster.local/ns/foo/sa/app"), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"a request to be a CA is refused": {
			pem: csrWithExtension(t, oidBasicConstraints, struct{ IsCA bool }{true}), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"a request for keyCertSign is refused": {
			pem: csrWithExtension(t, oidKeyUsage, keyUsageBits(0, keyUsageCertSign)), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"malformed basic constraints are refused": {
			pem: csrWithExtension(t, oidBasicConstraints, "not a sequence"), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
		"a malformed key usage is refused": {
			pem: csrWithExtension(t, oidKeyUsage, 42), allowed: []spiffeid.ID{foo}, want: ErrInvalidCSR},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			csr, err := ParseCSR(tc.pem)
			if err == nil {
				err = CheckCSR(csr, tc.allowed)
			}
			wantErrIs(t, err, tc.want)
			if tc.want == ErrIdentityNotAllowed && errors.Is(err, ErrInvalidCSR) {
				t.Errorf("identity refusal %v also wraps ErrInvalidCSR", err)
			}
		})
	}
}

// readRSA16384CSR reads a committed, validly self-signed CSR for an
// RSA-16384 key (made once with eight primes, since two-prime generation at
// that size takes minutes).
func readRSA16384CSR(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "rsa16384.csr"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRSA16384IsRefusedForItsSize(t *testing.T) {
	_, err := ParseCSR(readRSA16384CSR(t))
	if !errors.Is(err, ErrInvalidCSR) || !strings.Contains(err.Error(), "rsa key of 16384 bits") {
		t.Errorf("ParseCSR = %v; want a refusal for the key size", err)
	}
}

func TestCheckCSRRefusesNil(t *testing.T) {
	wantErrIs(t, CheckCSR(nil, nil), ErrInvalidCSR)
}

func mustDER(t *testing.T, p []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("no PEM block")
	}
	return b.Bytes
}

func newEd25519(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
