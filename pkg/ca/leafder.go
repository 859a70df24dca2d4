package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	encasn1 "encoding/asn1"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// A leaf is encoded here, byte for byte as x509.CreateCertificate encodes
// the templates Sign makes (leafder_test.go compares the two on random
// templates; leafder_fields_test.go holds every field of x509.Certificate
// to being encoded, refused or ignored as x509.CreateCertificate ignores
// it), and signed once. x509.CreateCertificate also verifies the
// signature it made, which for an ECDSA key costs twice the signing; for
// Go's own ECDSA and RSA keys that check guards against nothing a
// certificate's structure check (leafcheck.go) and the authority's probe
// (a leaf encoded here, verified up to the roots once per signer) do not.
// Any other signer (a key in a KMS or an HSM, behind crypto.Signer) goes
// through x509.CreateCertificate, check included.

// leafSigner is how an authority signs leaves without
// x509.CreateCertificate: with key, the key probed when the authority was
// built (any other signer goes through x509.CreateCertificate), and the
// signature algorithm's DER identifier and hash. The zero value means
// x509.CreateCertificate.
type leafSigner struct {
	key       crypto.Signer
	algorithm []byte
	hash      crypto.Hash
}

var (
	oidECDSAWithSHA256 = encasn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidECDSAWithSHA384 = encasn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 3}
	oidECDSAWithSHA512 = encasn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 4}
	oidSHA256WithRSA   = encasn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}

	oidExtnKeyUsage         = encasn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtnExtKeyUsage      = encasn1.ObjectIdentifier{2, 5, 29, 37}
	oidExtnBasicConstraints = encasn1.ObjectIdentifier{2, 5, 29, 19}
	oidExtnAuthorityKeyID   = encasn1.ObjectIdentifier{2, 5, 29, 35}
	oidExtnSubjectAltName   = encasn1.ObjectIdentifier{2, 5, 29, 17}

	oidServerAuth = encasn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidClientAuth = encasn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}
)

// leafSignerFor is the leafSigner of Go's own ECDSA and RSA keys, with the
// algorithm x509.CreateCertificate picks for them; the zero value for any
// other signer.
func leafSignerFor(signer crypto.Signer) leafSigner {
	var oid encasn1.ObjectIdentifier
	var hash crypto.Hash
	switch k := signer.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			oid, hash = oidECDSAWithSHA256, crypto.SHA256
		case elliptic.P384():
			oid, hash = oidECDSAWithSHA384, crypto.SHA384
		case elliptic.P521():
			oid, hash = oidECDSAWithSHA512, crypto.SHA512
		default:
			return leafSigner{}
		}
	case *rsa.PrivateKey:
		oid, hash = oidSHA256WithRSA, crypto.SHA256
	default:
		return leafSigner{}
	}
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oid)
		if _, ok := signer.(*rsa.PrivateKey); ok {
			b.AddASN1NULL()
		}
	})
	return leafSigner{key: signer, algorithm: b.BytesOrPanic(), hash: hash}
}

// errNotEncodable: the template holds something only x509.CreateCertificate
// encodes.
var errNotEncodable = errors.New("template not encodable here")

// createLeaf is x509.CreateCertificate for the leaf templates Sign makes,
// signed by a's key without verifying the signature again. Templates
// with anything else go to x509.CreateCertificate.
func (a *authority) createLeaf(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, error) {
	if a.create != nil || a.leafSigner.key == nil || a.leafSigner.key != a.signer {
		create := a.create
		if create == nil {
			create = x509.CreateCertificate
		}
		return create(rand.Reader, tmpl, a.cert, pub, a.signer)
	}
	tbs, err := marshalLeafTBS(tmpl, a.cert, a.leafSigner.algorithm, pub)
	if errors.Is(err, errNotEncodable) {
		return x509.CreateCertificate(rand.Reader, tmpl, a.cert, pub, a.signer)
	}
	if err != nil {
		return nil, err
	}
	h := a.leafSigner.hash.New()
	h.Write(tbs)
	sig, err := a.signer.Sign(rand.Reader, h.Sum(nil), a.leafSigner.hash)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(tbs)
		b.AddBytes(a.leafSigner.algorithm)
		b.AddASN1BitString(sig)
	})
	return b.Bytes()
}

// marshalLeafTBS encodes the TBSCertificate x509.CreateCertificate makes
// of tmpl below parent: version 3, serial, algorithm, parent's subject as
// issuer, validity, an empty subject, pub, and the extensions key usage,
// extended key usage, basic constraints, authority key ID and subject
// alternative names (DNS names and URIs), in its order and encoding.
func marshalLeafTBS(tmpl, parent *x509.Certificate, algorithm []byte, pub crypto.PublicKey) ([]byte, error) {
	if !encodableLeaf(tmpl) {
		return nil, errNotEncodable
	}
	if tmpl.SerialNumber == nil || tmpl.SerialNumber.Sign() <= 0 || len(tmpl.SerialNumber.Bytes()) > 20 {
		return nil, errNotEncodable
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	issuer := parent.RawSubject
	if len(issuer) == 0 {
		return nil, errNotEncodable
	}
	aki := tmpl.AuthorityKeyId
	if len(parent.SubjectKeyId) > 0 {
		aki = parent.SubjectKeyId // the issuer differs from the empty subject
	}
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(asn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
			b.AddASN1Int64(2)
		})
		b.AddASN1BigInt(tmpl.SerialNumber)
		b.AddBytes(algorithm)
		b.AddBytes(issuer)
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			addTime(b, tmpl.NotBefore)
			addTime(b, tmpl.NotAfter)
		})
		b.AddASN1(asn1.SEQUENCE, func(*cryptobyte.Builder) {}) // no subject
		b.AddBytes(spki)
		b.AddASN1(asn1.Tag(3).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				addLeafExtensions(b, tmpl, aki)
			})
		})
	})
	return b.Bytes()
}

// encodableLeaf reports whether tmpl holds only what marshalLeafTBS
// encodes.
func encodableLeaf(t *x509.Certificate) bool {
	if t.IsCA || !t.BasicConstraintsValid || t.MaxPathLen != 0 || t.MaxPathLenZero || t.KeyUsage == 0 ||
		len(t.RawSubject) > 0 || len(t.Subject.ToRDNSequence()) > 0 || len(t.SubjectKeyId) > 0 ||
		len(t.EmailAddresses) > 0 || len(t.IPAddresses) > 0 || len(t.DNSNames)+len(t.URIs) == 0 ||
		len(t.UnknownExtKeyUsage) > 0 || len(t.ExtraExtensions) > 0 || len(t.OCSPServer) > 0 ||
		len(t.IssuingCertificateURL) > 0 || len(t.CRLDistributionPoints) > 0 || len(t.PolicyIdentifiers) > 0 ||
		len(t.Policies) > 0 || t.PermittedDNSDomainsCritical || len(t.PermittedDNSDomains) > 0 ||
		len(t.ExcludedDNSDomains) > 0 || len(t.PermittedIPRanges) > 0 || len(t.ExcludedIPRanges) > 0 ||
		len(t.PermittedEmailAddresses) > 0 || len(t.ExcludedEmailAddresses) > 0 ||
		len(t.PermittedURIDomains) > 0 || len(t.ExcludedURIDomains) > 0 ||
		t.SignatureAlgorithm != x509.UnknownSignatureAlgorithm {
		return false
	}
	for _, u := range t.ExtKeyUsage {
		if u != x509.ExtKeyUsageServerAuth && u != x509.ExtKeyUsageClientAuth {
			return false
		}
	}
	for _, n := range t.DNSNames {
		if !isIA5(n) {
			return false
		}
	}
	for _, u := range t.URIs {
		if !isIA5(u.String()) {
			return false
		}
	}
	return true
}

// addTime encodes t as encoding/asn1 does: UTCTime from 1950 to 2049,
// GeneralizedTime otherwise, in UTC to the second.
func addTime(b *cryptobyte.Builder, t time.Time) {
	t = t.UTC().Truncate(time.Second)
	if y := t.Year(); y >= 1950 && y < 2050 {
		b.AddASN1UTCTime(t)
		return
	}
	b.AddASN1GeneralizedTime(t)
}

// addLeafExtensions adds the extensions in x509.CreateCertificate's order.
func addLeafExtensions(b *cryptobyte.Builder, t *x509.Certificate, aki []byte) {
	addExtension(b, oidExtnKeyUsage, true, func(b *cryptobyte.Builder) {
		bits := []byte{reverseBits(byte(t.KeyUsage)), reverseBits(byte(t.KeyUsage >> 8))}
		if bits[1] == 0 {
			bits = bits[:1]
		}
		addBitString(b, bits)
	})
	if len(t.ExtKeyUsage) > 0 {
		addExtension(b, oidExtnExtKeyUsage, false, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				for _, u := range t.ExtKeyUsage {
					if u == x509.ExtKeyUsageServerAuth {
						b.AddASN1ObjectIdentifier(oidServerAuth)
					} else {
						b.AddASN1ObjectIdentifier(oidClientAuth)
					}
				}
			})
		})
	}
	addExtension(b, oidExtnBasicConstraints, true, func(b *cryptobyte.Builder) {
		b.AddASN1(asn1.SEQUENCE, func(*cryptobyte.Builder) {}) // not a CA
	})
	if len(aki) > 0 {
		addExtension(b, oidExtnAuthorityKeyID, false, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1(asn1.Tag(0).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes(aki) })
			})
		})
	}
	// Critical: the subject is empty (RFC 5280, 4.2.1.6).
	addExtension(b, oidExtnSubjectAltName, true, func(b *cryptobyte.Builder) {
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			for _, n := range t.DNSNames {
				b.AddASN1(asn1.Tag(2).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes([]byte(n)) })
			}
			for _, u := range t.URIs {
				b.AddASN1(asn1.Tag(6).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes([]byte(u.String())) })
			}
		})
	})
}

func addExtension(b *cryptobyte.Builder, oid encasn1.ObjectIdentifier, critical bool, value func(*cryptobyte.Builder)) {
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oid)
		if critical {
			b.AddASN1Boolean(true)
		}
		b.AddASN1(asn1.OCTET_STRING, value)
	})
}

// addBitString encodes bits as encoding/asn1 encodes an asn1.BitString
// whose length ends at its last set bit.
func addBitString(b *cryptobyte.Builder, bits []byte) {
	length := len(bits) * 8
	for i := len(bits) - 1; i >= 0; i-- {
		if bits[i] != 0 {
			for bit := 0; bits[i]>>bit&1 == 0; bit++ {
				length--
			}
			break
		}
		length -= 8
	}
	b.AddASN1(asn1.BIT_STRING, func(b *cryptobyte.Builder) {
		b.AddUint8(uint8((8 - length%8) % 8))
		b.AddBytes(bits)
	})
}

func reverseBits(in byte) byte {
	var out byte
	for range 8 {
		out = out<<1 | in&1
		in >>= 1
	}
	return out
}

// isIA5 reports whether s is ASCII, as an IA5String must be.
func isIA5(s string) bool {
	for i := range len(s) {
		if s[i] > 127 {
			return false
		}
	}
	return true
}
