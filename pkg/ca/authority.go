package ca

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"
)

// Where an authority's material came from.
const (
	sourceSelfSigned = "self-signed"
	sourcePluggedIn  = "plugged-in"
)

// authority is a loaded, checked signer with its chain and roots. It is
// immutable once published; a rotation builds a new one.
type authority struct {
	source    string
	signer    crypto.Signer
	cert      *x509.Certificate
	notBefore time.Time // the latest NotBefore along the chain to the root
	notAfter  time.Time // the earliest NotAfter along the chain to the root
	// verifyEach makes every issued leaf verified in full up to the roots,
	// for a chain with name constraints; otherwise its structure is
	// checked (leafcheck.go).
	verifyEach bool
	// create signs a certificate; nil means createLeaf's own encoding or
	// x509.CreateCertificate. Tests replace it with one that misbehaves.
	create     func(rand io.Reader, tmpl, parent *x509.Certificate, pub, priv any) ([]byte, error)
	leafSigner leafSigner // how createLeaf signs; zero: x509.CreateCertificate

	roots       []*x509.Certificate // the set's roots, which its chain leads to
	trust       []*x509.Certificate // the roots published: roots, then any a rotation keeps trusted
	issued      *issuance           // the latest expiry the key signed, shared by copies (issuance.go)
	material    *KeyMaterial        // the set as read, for a rotation to keep it
	rootPool    *x509.CertPool
	interPool   *x509.CertPool // the signing cert and the intermediates above it
	chainPEM    []string       // signing cert, then intermediates; empty if the signer is a root
	rootsPEM    string
	fingerprint [sha256.Size]byte
	bundle      *Bundle
}

// newAuthority parses and checks a set at time now. Errors are FileErrors.
func newAuthority(set rawSet, now time.Time, source string) (*authority, error) {
	f := set.files
	certs, err := parseCerts(set.cert)
	if err != nil {
		return nil, fileErr(f.cert, err)
	}
	cert := certs[0]
	signer, err := parsePrivateKey(set.key)
	if err != nil {
		return nil, fileErr(f.key, err)
	}
	if err := checkPublicKey(signer.Public()); err != nil {
		return nil, fileErr(f.key, err)
	}
	if !publicKeysEqual(signer.Public(), cert.PublicKey) {
		return nil, fileErr(f.key, fmt.Errorf("private key does not match %s", f.cert))
	}
	if err := checkCACert(cert, now); err != nil {
		return nil, fileErr(f.cert, err)
	}
	extra := certs[1:]
	var chain []*x509.Certificate
	if f.chain != "" && len(bytes.TrimSpace(set.chain)) > 0 {
		if chain, err = parseCerts(set.chain); err != nil {
			return nil, fileErr(f.chain, err)
		}
		extra = append(extra, chain...)
	}
	roots, err := parseCerts(set.roots)
	if err != nil {
		return nil, fileErr(f.roots, err)
	}
	files := certFiles{}
	files.add(f.roots, roots...)
	files.add(f.cert, certs...)
	files.add(f.chain, chain...)
	a := &authority{source: source, signer: signer, cert: cert, roots: roots, trust: roots, issued: new(issuance),
		leafSigner: leafSignerFor(signer),
		material:   &KeyMaterial{CACert: set.cert, CAKey: set.key, CertChain: set.chain, RootCert: set.roots}}
	if err := a.buildChain(extra, now, f, files); err != nil {
		return nil, err
	}
	return a, nil
}

// buildChain verifies the signing cert up to the roots and keeps the path,
// one whose certificates allow the usages leaves carry.
func (a *authority) buildChain(extra []*x509.Certificate, now time.Time, f setFiles, files certFiles) error {
	a.rootPool = x509.NewCertPool()
	for _, r := range a.roots {
		a.rootPool.AddCert(r)
	}
	candidates := x509.NewCertPool()
	for _, c := range extra {
		if !c.Equal(a.cert) && !containsCert(a.roots, c) {
			candidates.AddCert(c)
		}
	}
	// Every path, whatever usages it allows: pathForLeaves then picks one
	// that allows the leaves' usages, or names the certificate that does
	// not, and the probe verifies a leaf with exactly those usages.
	chains, err := a.cert.Verify(x509.VerifyOptions{
		Roots:         a.rootPool,
		Intermediates: candidates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fileErr(f.cert, fmt.Errorf("does not verify to %s: %w", f.roots, err))
	}
	path, err := pathForLeaves(chains, files) // signing cert, intermediates..., root
	if err != nil {
		return err
	}
	a.notBefore, a.notAfter = a.cert.NotBefore, a.cert.NotAfter
	for _, c := range path {
		if c.NotBefore.After(a.notBefore) {
			a.notBefore = c.NotBefore
		}
		if c.NotAfter.Before(a.notAfter) {
			a.notAfter = c.NotAfter
		}
		a.verifyEach = a.verifyEach || hasNameConstraints(c)
	}
	a.interPool = x509.NewCertPool()
	if len(path) > 1 {
		for _, c := range path[:len(path)-1] {
			a.interPool.AddCert(c)
			a.chainPEM = append(a.chainPEM, string(encodeCert(c)))
		}
	}
	a.rootsPEM = string(encodeCerts(a.roots))
	h := sha256.New()
	for _, c := range path[:len(path)-1] {
		h.Write(c.Raw)
	}
	h.Write([]byte(a.rootsPEM))
	h.Sum(a.fingerprint[:0])
	if err := a.probeLeaf(now); err != nil {
		return fileErr(f.cert, err)
	}
	return nil
}

// probeLeaf signs a leaf for the signer's own key as Sign does and
// verifies it up to the roots at now, once per authority: the chain then
// accepts a leaf below the signing certificate (path length constraints
// included, which verifying the signing certificate alone does not test),
// and the signer makes valid signatures over what createLeaf encodes. Sign
// relies on it to check each leaf by its structure only. Under name
// constraints the probe has no names (every leaf is verified in full
// there anyway).
func (a *authority) probeLeaf(now time.Time) error {
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		NotBefore:             a.notBefore,
		NotAfter:              a.notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        a.cert.SubjectKeyId,
	}
	var der []byte
	var err error
	if a.verifyEach {
		der, err = x509.CreateCertificate(rand.Reader, tmpl, a.cert, a.signer.Public(), a.signer)
	} else {
		tmpl.URIs = []*url.URL{{Scheme: "spiffe", Host: "probe.invalid", Path: "/probe"}}
		der, err = a.createLeaf(tmpl, a.signer.Public())
	}
	if err != nil {
		return fmt.Errorf("cannot sign a leaf: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("cannot parse a signed leaf: %w", err)
	}
	if err := a.verifyToRoots(leaf, now); err != nil {
		return fmt.Errorf("a leaf it signs does not verify to the roots: %w", err)
	}
	return nil
}

// withTrust is a with extra roots trusted beside its own, after them: the
// bundle it publishes and the root element of the chains it returns hold
// them all.
func (a *authority) withTrust(extra []*x509.Certificate) *authority {
	b := *a
	b.trust = slices.Clone(a.roots)
	for _, c := range extra {
		if !containsCert(b.trust, c) {
			b.trust = append(b.trust, c)
		}
	}
	b.rootsPEM = string(encodeCerts(b.trust))
	h := sha256.New()
	h.Write(a.fingerprint[:])
	h.Write([]byte(b.rootsPEM))
	h.Sum(b.fingerprint[:0])
	b.bundle = nil
	return &b
}

// verifyToRoots verifies leaf up to the authority's roots at now, once for
// each usage a leaf carries: Go's verifier accepts a chain that allows any
// one of the usages asked for together, and a peer asks for one of them.
func (a *authority) verifyToRoots(leaf *x509.Certificate, now time.Time) error {
	for _, u := range leafExtKeyUsages {
		if _, err := leaf.Verify(x509.VerifyOptions{
			Roots:         a.rootPool,
			Intermediates: a.interPool,
			CurrentTime:   now,
			KeyUsages:     []x509.ExtKeyUsage{u},
		}); err != nil {
			return fmt.Errorf("as %s: %w", u, err)
		}
	}
	return nil
}

// checkCACert checks that cert may sign certificates at time now.
func checkCACert(cert *x509.Certificate, now time.Time) error {
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return errors.New("certificate is not a CA (basic constraints CA is not true)")
	}
	if cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return errors.New("certificate lacks the keyCertSign key usage")
	}
	if now.Before(cert.NotBefore) {
		return fmt.Errorf("certificate is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(cert.NotAfter) {
		return fmt.Errorf("certificate expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func containsCert(certs []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range certs {
		if x.Equal(c) {
			return true
		}
	}
	return false
}

// parseCerts reads one or more PEM certificates. Text around the blocks is
// ignored, as openssl writes it; any other PEM block type is an error.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q; want CERTIFICATE", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}
