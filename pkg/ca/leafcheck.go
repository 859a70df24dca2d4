package ca

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"
)

// An issued leaf is checked before it is returned, without verifying its
// signature and building its chain again for every certificate:
//
//   - the signer's key is the signing certificate's (newAuthority), and its
//     signatures over what createLeaf encodes verify (probeLeaf); a signer
//     other than Go's own ECDSA and RSA keys goes through
//     x509.CreateCertificate, which verifies every signature it made;
//   - the signing certificate's chain to the roots was verified once, when
//     the authority was built, with a leaf below it (buildChain, probeLeaf);
//   - so what is left to check per leaf is its structure: issued by the
//     signing certificate (issuer name, authority key ID), within the
//     chain's validity, with exactly the names, key and usages asked for.
//
// A chain carrying name constraints is the exception: whether a leaf meets
// them depends on its names, so such an authority verifies every leaf in
// full (authority.verifyEach).

// leafWant is what an issued leaf must be.
type leafWant struct {
	tmpl *x509.Certificate
	pub  crypto.PublicKey
}

// A leafCheck is one structural rule of an issued leaf. It returns why the
// leaf breaks it.
type leafCheck func(a *authority, leaf *x509.Certificate, want leafWant) error

var leafChecks = []leafCheck{
	checkLeafIssuer, checkLeafValidity, checkLeafNames, checkLeafKey, checkLeafUsage,
}

// checkLeaf applies every leafCheck.
func (a *authority) checkLeaf(leaf *x509.Certificate, want leafWant) error {
	for _, check := range leafChecks {
		if err := check(a, leaf, want); err != nil {
			return fmt.Errorf("issued certificate: %w", err)
		}
	}
	return nil
}

func checkLeafIssuer(a *authority, leaf *x509.Certificate, _ leafWant) error {
	if !bytes.Equal(leaf.RawIssuer, a.cert.RawSubject) {
		return fmt.Errorf("issuer %q is not the signing certificate %q", leaf.Issuer, a.cert.Subject)
	}
	if !bytes.Equal(leaf.AuthorityKeyId, a.cert.SubjectKeyId) {
		return fmt.Errorf("authority key ID %x is not the signing certificate's %x", leaf.AuthorityKeyId, a.cert.SubjectKeyId)
	}
	if leaf.SignatureAlgorithm == x509.UnknownSignatureAlgorithm {
		return errors.New("unknown signature algorithm")
	}
	return nil
}

// checkLeafValidity keeps the leaf inside the request's window, which Sign
// has already kept inside the chain's.
func checkLeafValidity(a *authority, leaf *x509.Certificate, want leafWant) error {
	switch {
	case leaf.NotBefore.Before(a.notBefore) || leaf.NotAfter.After(a.notAfter):
		return fmt.Errorf("validity %s to %s is outside the chain's %s to %s", leaf.NotBefore, leaf.NotAfter, a.notBefore, a.notAfter)
	case leaf.NotAfter.After(want.tmpl.NotAfter):
		return fmt.Errorf("not after %s is later than the %s asked for", leaf.NotAfter, want.tmpl.NotAfter)
	case leaf.NotBefore.Before(want.tmpl.NotBefore.Truncate(time.Second)):
		return fmt.Errorf("not before %s is earlier than the %s asked for", leaf.NotBefore, want.tmpl.NotBefore)
	case !leaf.NotBefore.Before(leaf.NotAfter):
		return fmt.Errorf("not before %s is not before not after %s", leaf.NotBefore, leaf.NotAfter)
	}
	return nil
}

// checkLeafNames requires exactly the SANs policy allowed and no subject.
func checkLeafNames(_ *authority, leaf *x509.Certificate, want leafWant) error {
	uris := make([]string, len(leaf.URIs))
	for i, u := range leaf.URIs {
		uris[i] = u.String()
	}
	wantURIs := make([]string, len(want.tmpl.URIs))
	for i, u := range want.tmpl.URIs {
		wantURIs[i] = u.String()
	}
	switch {
	case !slices.Equal(uris, wantURIs):
		return fmt.Errorf("URI SANs %q, want %q", uris, wantURIs)
	case !slices.Equal(leaf.DNSNames, want.tmpl.DNSNames):
		return fmt.Errorf("DNS SANs %q, want %q", leaf.DNSNames, want.tmpl.DNSNames)
	case len(leaf.IPAddresses) > 0 || len(leaf.EmailAddresses) > 0:
		return errors.New("IP or email SANs")
	case len(leaf.Subject.Names) > 0:
		return fmt.Errorf("subject %q, want none", leaf.Subject)
	}
	return nil
}

func checkLeafKey(_ *authority, leaf *x509.Certificate, want leafWant) error {
	if !publicKeysEqual(leaf.PublicKey, want.pub) {
		return errors.New("public key is not the one asked for")
	}
	return nil
}

// checkLeafUsage requires an end-entity certificate with exactly the
// usages asked for.
func checkLeafUsage(_ *authority, leaf *x509.Certificate, want leafWant) error {
	switch {
	case !leaf.BasicConstraintsValid || leaf.IsCA:
		return errors.New("not marked as an end-entity certificate")
	case leaf.KeyUsage != want.tmpl.KeyUsage:
		return fmt.Errorf("key usage %b, want %b", leaf.KeyUsage, want.tmpl.KeyUsage)
	case !slices.Equal(leaf.ExtKeyUsage, want.tmpl.ExtKeyUsage) || len(leaf.UnknownExtKeyUsage) > 0:
		return fmt.Errorf("extended key usages %v, want %v", leaf.ExtKeyUsage, want.tmpl.ExtKeyUsage)
	}
	return nil
}

// hasNameConstraints reports whether c constrains the names of the
// certificates below it.
func hasNameConstraints(c *x509.Certificate) bool {
	return c.PermittedDNSDomainsCritical ||
		len(c.PermittedDNSDomains)+len(c.ExcludedDNSDomains)+
			len(c.PermittedIPRanges)+len(c.ExcludedIPRanges)+
			len(c.PermittedEmailAddresses)+len(c.ExcludedEmailAddresses)+
			len(c.PermittedURIDomains)+len(c.ExcludedURIDomains) > 0
}
