package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// MaxCSRSize bounds the PEM a peer may send as a certificate request.
const MaxCSRSize = 32 << 10

// A csrCheck is one rule of the CSR policy. It returns why it refuses.
type csrCheck func(csr *x509.CertificateRequest) error

// ParseCSR decodes one PEM certificate request and runs the checks that do
// not depend on the caller: a single CERTIFICATE REQUEST (or NEW
// CERTIFICATE REQUEST) block of at most MaxCSRSize bytes with nothing but
// whitespace around it, a supported key, a valid self-signature, and no
// request to be a CA. Refusals wrap ErrInvalidCSR. The CSR's subject is
// ignored; signed certificates have an empty subject.
func ParseCSR(pemBytes []byte) (*x509.CertificateRequest, error) {
	der, err := decodeCSRPEM(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parse csr: %w: %w", ErrInvalidCSR, err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("parse csr: %w: %w", ErrInvalidCSR, err)
	}
	// The key check runs first: it is cheap and keeps huge keys away from
	// the signature check.
	if err := runChecks(csr, checkKey, checkSignature, checkNotCA); err != nil {
		return nil, fmt.Errorf("parse csr: %w", err)
	}
	return csr, nil
}

// CheckCSR applies the caller-dependent policy to a CSR from ParseCSR: no
// DNS, IP or email SANs, and every URI SAN a SPIFFE ID in allowed. It repeats
// ParseCSR's cheap key and CA checks (not the signature check). Identity
// refusals wrap ErrIdentityNotAllowed; the others ErrInvalidCSR.
func CheckCSR(csr *x509.CertificateRequest, allowed []spiffeid.ID) error {
	if csr == nil {
		return fmt.Errorf("check csr: %w: no request", ErrInvalidCSR)
	}
	if err := runChecks(csr, checkKey, checkNotCA, checkNoOtherSANs, checkURIs(allowed)); err != nil {
		return fmt.Errorf("check csr: %w", err)
	}
	return nil
}

func runChecks(csr *x509.CertificateRequest, checks ...csrCheck) error {
	for _, check := range checks {
		if err := check(csr); err != nil {
			return err
		}
	}
	return nil
}

// decodeCSRPEM returns the DER of the only PEM block in data.
func decodeCSRPEM(data []byte) ([]byte, error) {
	if len(data) > MaxCSRSize {
		return nil, fmt.Errorf("%d bytes is above the limit of %d", len(data), MaxCSRSize)
	}
	trimmed := bytes.TrimSpace(data)
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN ")) {
		return nil, errors.New("not a PEM block")
	}
	block, rest := pem.Decode(trimmed)
	if block == nil {
		return nil, errors.New("malformed PEM block")
	}
	if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("PEM block %q; want CERTIFICATE REQUEST", block.Type)
	}
	if len(block.Headers) > 0 {
		return nil, errors.New("PEM headers are not allowed")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		if next, _ := pem.Decode(rest); next != nil {
			return nil, errors.New("more than one PEM block")
		}
		return nil, errors.New("data after the PEM block")
	}
	return block.Bytes, nil
}

func checkKey(csr *x509.CertificateRequest) error {
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	return nil
}

func checkSignature(csr *x509.CertificateRequest) error {
	if err := csr.CheckSignature(); err != nil {
		return fmt.Errorf("%w: bad self-signature: %w", ErrInvalidCSR, err)
	}
	return nil
}

var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
)

// keyUsageCertSign is the bit number of keyCertSign in the KeyUsage BIT
// STRING (RFC 5280, 4.2.1.3).
const keyUsageCertSign = 5

// checkNotCA refuses a request for CA=true or for the keyCertSign usage.
func checkNotCA(csr *x509.CertificateRequest) error {
	for _, ext := range csr.Extensions {
		switch {
		case ext.Id.Equal(oidBasicConstraints):
			var bc struct {
				IsCA       bool `asn1:"optional"`
				MaxPathLen int  `asn1:"optional,default:-1"`
			}
			if _, err := asn1.Unmarshal(ext.Value, &bc); err != nil {
				return fmt.Errorf("%w: malformed basic constraints: %w", ErrInvalidCSR, err)
			}
			if bc.IsCA {
				return fmt.Errorf("%w: requests a CA certificate", ErrInvalidCSR)
			}
		case ext.Id.Equal(oidKeyUsage):
			var ku asn1.BitString
			if _, err := asn1.Unmarshal(ext.Value, &ku); err != nil {
				return fmt.Errorf("%w: malformed key usage: %w", ErrInvalidCSR, err)
			}
			if ku.At(keyUsageCertSign) == 1 {
				return fmt.Errorf("%w: requests the keyCertSign usage", ErrInvalidCSR)
			}
		}
	}
	return nil
}

func checkNoOtherSANs(csr *x509.CertificateRequest) error {
	switch {
	case len(csr.DNSNames) > 0:
		return fmt.Errorf("%w: DNS SANs are not allowed", ErrInvalidCSR)
	case len(csr.IPAddresses) > 0:
		return fmt.Errorf("%w: IP SANs are not allowed", ErrInvalidCSR)
	case len(csr.EmailAddresses) > 0:
		return fmt.Errorf("%w: email SANs are not allowed", ErrInvalidCSR)
	}
	return nil
}

// checkURIs requires every URI SAN to be a SPIFFE ID in allowed.
func checkURIs(allowed []spiffeid.ID) csrCheck {
	return func(csr *x509.CertificateRequest) error {
		for _, u := range csr.URIs {
			id, err := spiffeid.FromURI(u)
			if err != nil {
				return fmt.Errorf("%w: URI SAN is not a SPIFFE ID: %w", ErrInvalidCSR, err)
			}
			if !slices.Contains(allowed, id) {
				return fmt.Errorf("%w: %s", ErrIdentityNotAllowed, id)
			}
		}
		return nil
	}
}
