package ca

import (
	"bytes"
	"crypto"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"net/url"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// derAuthority is an authority of a root with key, as newAuthority builds it.
func derAuthority(t testing.TB, key crypto.Signer) *authority {
	t.Helper()
	root := catest.NewRoot(t, catest.WithKey(key))
	set := catest.CACerts{Signing: root, Roots: []*catest.Cert{root}}
	files := set.Files()
	a, err := newAuthority(rawSet{files: istioFiles, cert: files[FileCACert], key: files[FileCAKey],
		chain: files[FileCertChain], roots: files[FileRootCert]}, time.Now(), sourcePluggedIn)
	if err != nil {
		t.Fatal(err)
	}
	if a.leafSigner.key == nil {
		t.Fatalf("%T: no leaf signer", key)
	}
	return a
}

// matchesStdlib signs tmpl both ways and requires the same TBSCertificate
// and signature algorithm, and a signature that verifies; or, for a
// template x509.CreateCertificate refuses, a refusal.
func matchesStdlib(t *testing.T, a *authority, tmpl *x509.Certificate, pub crypto.PublicKey) {
	t.Helper()
	want, stdErr := x509.CreateCertificate(rand.Reader, tmpl, a.cert, pub, a.signer)
	got, err := a.createLeaf(tmpl, pub)
	if stdErr != nil {
		if err == nil {
			t.Fatalf("x509.CreateCertificate refuses the template (%v); createLeaf encoded it", stdErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("createLeaf: %v", err)
	}
	wc, err := x509.ParseCertificate(want)
	if err != nil {
		t.Fatal(err)
	}
	gc, err := x509.ParseCertificate(got)
	if err != nil {
		t.Fatalf("parse what createLeaf made: %v", err)
	}
	if !bytes.Equal(gc.RawTBSCertificate, wc.RawTBSCertificate) {
		t.Fatalf("TBSCertificate differs from x509.CreateCertificate's:\n got %x\nwant %x", gc.RawTBSCertificate, wc.RawTBSCertificate)
	}
	if gc.SignatureAlgorithm != wc.SignatureAlgorithm {
		t.Fatalf("signature algorithm %v, want %v", gc.SignatureAlgorithm, wc.SignatureAlgorithm)
	}
	if err := gc.CheckSignatureFrom(a.cert); err != nil {
		t.Fatalf("signature: %v", err)
	}
}

// leafTemplate is a template as Sign makes one.
func leafTemplate(a *authority, serial *big.Int, nb, na time.Time, dns []string, uris ...*url.URL) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial, NotBefore: nb, NotAfter: na, URIs: uris, DNSNames: dns,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        a.cert.SubjectKeyId,
	}
}

// The leaves encoded here are x509.CreateCertificate's, byte for byte, for
// every signing key type istiod makes or loads and every key a CSR holds.
func TestCreateLeafMatchesTheStandardLibrary(t *testing.T) {
	signers := map[string]crypto.Signer{
		"ecdsa-p256": catest.NewECDSAKey(t, elliptic.P256()),
		"ecdsa-p384": catest.NewECDSAKey(t, elliptic.P384()),
		"rsa-2048":   rsa2048(),
	}
	pubs := map[string]crypto.PublicKey{
		"ecdsa-p256": catest.NewKey(t).Public(),
		"rsa-2048":   rsa2048().Public(),
	}
	id := testID("ns", "sa").URL()
	now := time.Now()
	for sname, signer := range signers {
		a := derAuthority(t, signer)
		for pname, pub := range pubs {
			for name, tmpl := range map[string]*x509.Certificate{
				"workload":            leafTemplate(a, newSerial(), now.Add(-2*time.Minute), now.Add(24*time.Hour), nil, id),
				"serving":             leafTemplate(a, newSerial(), now, now.Add(time.Hour), []string{"istiod.istio-system.svc", "localhost"}),
				"both":                leafTemplate(a, big.NewInt(1), now, now.Add(time.Hour), []string{"a"}, id),
				"generalized time":    leafTemplate(a, newSerial(), time.Date(2049, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(2051, 1, 1, 0, 0, 0, 0, time.UTC), nil, id),
				"fractional seconds":  leafTemplate(a, newSerial(), now.Add(1234567*time.Nanosecond), now.Add(time.Hour+time.Millisecond), nil, id),
				"another time zone":   leafTemplate(a, newSerial(), now.In(time.FixedZone("x", 5*3600)), now.Add(time.Hour), nil, id),
				"large serial":        leafTemplate(a, new(big.Int).Lsh(big.NewInt(1), 150), now, now.Add(time.Hour), nil, id),
				"serial with top bit": leafTemplate(a, new(big.Int).SetBytes(bytes.Repeat([]byte{0xff}, 16)), now, now.Add(time.Hour), nil, id),
				"no extended usage": func() *x509.Certificate {
					tm := leafTemplate(a, newSerial(), now, now.Add(time.Hour), nil, id)
					tm.ExtKeyUsage = nil
					return tm
				}(),
				"key usage in two bytes": func() *x509.Certificate {
					tm := leafTemplate(a, newSerial(), now, now.Add(time.Hour), nil, id)
					tm.KeyUsage |= x509.KeyUsageDecipherOnly
					return tm
				}(),
			} {
				t.Run(sname+"/"+pname+"/"+name, func(t *testing.T) { matchesStdlib(t, a, tmpl, pub) })
			}
		}
	}
}

// Templates with anything else go to x509.CreateCertificate.
func TestCreateLeafLeavesOtherTemplatesToTheStandardLibrary(t *testing.T) {
	a := derAuthority(t, catest.NewKey(t))
	now := time.Now()
	tmpl := leafTemplate(a, newSerial(), now, now.Add(time.Hour), nil, testID("ns", "sa").URL())
	tmpl.EmailAddresses = []string{"a@example.com"}
	if _, err := marshalLeafTBS(tmpl, a.cert, a.leafSigner.algorithm, catest.NewKey(t).Public()); err != errNotEncodable {
		t.Fatalf("a template with an email address: %v, want errNotEncodable", err)
	}
	der, err := a.createLeaf(tmpl, catest.NewKey(t).Public())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := x509.ParseCertificate(der); err != nil || len(c.EmailAddresses) != 1 {
		t.Fatalf("the standard library's leaf: %v", err)
	}
}

func FuzzCreateLeafMatchesTheStandardLibrary(f *testing.F) {
	a := derAuthority(f, catest.NewKey(f))
	pub := catest.NewKey(f).Public()
	f.Add([]byte{1}, int64(0), int64(3600), "spiffe://cluster.local/ns/a/sa/b", "")
	f.Add([]byte{0x80, 0}, int64(-1e9), int64(4e9), "", "istiod.istio-system.svc")
	f.Fuzz(func(t *testing.T, serial []byte, nb, life int64, uri, dns string) {
		n := new(big.Int).SetBytes(serial)
		if n.Sign() == 0 || len(serial) > 20 {
			return
		}
		notBefore := time.Unix(nb%(1<<36), 0)
		tmpl := leafTemplate(a, n, notBefore, notBefore.Add(time.Duration(life%(1<<33))*time.Second), nil)
		if dns != "" {
			tmpl.DNSNames = []string{dns}
		}
		if uri != "" {
			u, err := url.Parse(uri)
			if err != nil {
				return
			}
			tmpl.URIs = []*url.URL{u}
		}
		if len(tmpl.DNSNames)+len(tmpl.URIs) == 0 {
			return
		}
		matchesStdlib(t, a, tmpl, pub)
	})
}
