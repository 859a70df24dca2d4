package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// KeyType names a key algorithm and size for the self-signed root.
type KeyType string

// Supported key types.
const (
	KeyTypeECDSAP256 KeyType = "ecdsa-p256"
	KeyTypeECDSAP384 KeyType = "ecdsa-p384"
	KeyTypeRSA2048   KeyType = "rsa-2048"
	KeyTypeRSA3072   KeyType = "rsa-3072"
	KeyTypeRSA4096   KeyType = "rsa-4096"
)

// DefaultKeyType is used when none is configured.
const DefaultKeyType = KeyTypeECDSAP256

// Key size bounds enforced on every CA key, workload key and CSR.
const (
	minRSABits = 2048
	maxRSABits = 4096
)

// ParseKeyType parses a key type name, case-insensitively. The empty string
// means DefaultKeyType.
func ParseKeyType(s string) (KeyType, error) {
	t := KeyType(strings.ToLower(strings.TrimSpace(s)))
	if t == "" {
		return DefaultKeyType, nil
	}
	if t.valid() {
		return t, nil
	}
	return "", fmt.Errorf("parse key type %q: want one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096", s)
}

func (t KeyType) valid() bool {
	switch t {
	case KeyTypeECDSAP256, KeyTypeECDSAP384, KeyTypeRSA2048, KeyTypeRSA3072, KeyTypeRSA4096:
		return true
	}
	return false
}

// GenerateKey makes a new private key of type t.
func GenerateKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case KeyTypeECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyTypeECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case KeyTypeRSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case KeyTypeRSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	case KeyTypeRSA4096:
		return rsa.GenerateKey(rand.Reader, 4096)
	}
	return nil, fmt.Errorf("generate key: unknown key type %q", t)
}

// checkPublicKey enforces the key bounds: RSA 2048–4096 bits, ECDSA P-256 or
// P-384. Everything else is refused.
func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < minRSABits || n > maxRSABits {
			return fmt.Errorf("rsa key of %d bits; want %d to %d", n, minRSABits, maxRSABits)
		}
		return nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("ecdsa curve %s; want P-256 or P-384", k.Curve.Params().Name)
		}
		return nil
	case ed25519.PublicKey:
		return errors.New("ed25519 keys are not supported; want rsa or ecdsa")
	case nil:
		return errors.New("no public key")
	}
	return fmt.Errorf("unsupported public key type %T", pub)
}

// publicKeysEqual reports whether a and b are the same key.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

// parsePrivateKey reads exactly one private key from PEM: PKCS#8
// ("PRIVATE KEY"), PKCS#1 ("RSA PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY").
// An "EC PARAMETERS" block, as openssl writes it, is skipped.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	var key crypto.Signer
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "EC PARAMETERS" {
			continue
		}
		if key != nil {
			return nil, errors.New("more than one PEM block holds a key")
		}
		if _, ok := block.Headers["Proc-Type"]; ok {
			return nil, errors.New("encrypted private keys are not supported")
		}
		k, err := parseKeyBlock(block)
		if err != nil {
			return nil, err
		}
		key = k
	}
	if key == nil {
		return nil, errors.New("no PEM private key found")
	}
	return key, nil
}

func parseKeyBlock(block *pem.Block) (crypto.Signer, error) {
	var (
		k   any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unexpected PEM block %q; want a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", strings.ToLower(block.Type), err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", k)
	}
	return s, nil
}

// marshalPrivateKeyPEM encodes key as a PKCS#8 PEM block.
func marshalPrivateKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// subjectKeyID derives a key identifier from the subjectPublicKey bits:
// the leftmost 160 bits of their SHA-256 hash (RFC 7093, method 1).
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("marshal public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}
