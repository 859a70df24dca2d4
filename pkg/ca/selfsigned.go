package ca

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// newSelfSignedMaterial makes a self-signed root for cfg at time now. The
// root is its own chain: cert-chain.pem is empty and root-cert.pem equals
// ca-cert.pem, as in Istio's istio-ca-secret.
func newSelfSignedMaterial(cfg *Config, now time.Time) (*KeyMaterial, error) {
	key, err := GenerateKey(cfg.KeyType)
	if err != nil {
		return nil, fmt.Errorf("make self-signed root: %w", err)
	}
	ski, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, fmt.Errorf("make self-signed root: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{Organization: []string{cfg.TrustDomain.Name()}},
		NotBefore:             now.Add(-cfg.Backdate),
		NotAfter:              now.Add(cfg.RootTTL),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          ski,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("make self-signed root: %w", err)
	}
	keyPEM, err := marshalPrivateKeyPEM(key)
	if err != nil {
		return nil, fmt.Errorf("make self-signed root: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &KeyMaterial{CACert: certPEM, CAKey: keyPEM, RootCert: certPEM}, nil
}

// newSerial returns a random, positive 128-bit serial number.
func newSerial() *big.Int {
	b := make([]byte, 16)
	for {
		_, _ = rand.Read(b) // crypto/rand.Read never fails
		if n := new(big.Int).SetBytes(b); n.Sign() > 0 {
			return n
		}
	}
}
