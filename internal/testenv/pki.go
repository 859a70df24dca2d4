package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the files the apiserver is started with, all inside one run
// directory and all generated for that run.
type pki struct {
	caPEM       []byte
	caFile      string // CA that signed the serving certificate
	certFile    string // serving certificate
	keyFile     string // serving key
	saPubFile   string // ServiceAccount token verification key
	saKeyFile   string // ServiceAccount token signing key
	tokenFile   string // --token-auth-file
	adminToken  string
	certSANsIPs []net.IP
}

const adminUser = "bulwark-testenv-admin"

// servingDNSNames are the names a client inside a cluster would use, so
// code that builds in-cluster URLs can still verify the certificate.
var servingDNSNames = []string{
	"localhost",
	"kubernetes",
	"kubernetes.default",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
}

// newPKI writes a self-signed CA, a serving certificate for loopback, a
// ServiceAccount signing key pair and a static token file into dir.
func newPKI(dir string) (*pki, error) {
	p := &pki{
		caFile:      filepath.Join(dir, "ca.crt"),
		certFile:    filepath.Join(dir, "apiserver.crt"),
		keyFile:     filepath.Join(dir, "apiserver.key"),
		saPubFile:   filepath.Join(dir, "sa.pub"),
		saKeyFile:   filepath.Join(dir, "sa.key"),
		tokenFile:   filepath.Join(dir, "tokens.csv"),
		certSANsIPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	}
	if err := p.writeServing(); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if err := p.writeServiceAccountKeys(); err != nil {
		return nil, fmt.Errorf("service account keys: %w", err)
	}
	if err := p.writeTokenFile(); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	return p, nil
}

func (p *pki) writeServing() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "bulwark-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     servingDNSNames,
		IPAddresses:  p.certSANsIPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caFile, p.caPEM, 0o600); err != nil {
		return err
	}
	if err := writePEM(p.certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePrivateKey(p.keyFile, key)
}

// writeServiceAccountKeys uses RSA, as most clusters do, so tokens are RS256
// like the ones verifiers meet in production.
func (p *pki) writeServiceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := writePEM(p.saPubFile, "PUBLIC KEY", pub); err != nil {
		return err
	}
	return writePrivateKey(p.saKeyFile, key)
}

// writeTokenFile makes the admin token: a member of system:masters, which
// RBAC lets do anything.
func (p *pki) writeTokenFile() error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	p.adminToken = hex.EncodeToString(b)
	line := fmt.Sprintf("%s,%s,%s-uid,\"system:masters\"\n", p.adminToken, adminUser, adminUser)
	return os.WriteFile(p.tokenFile, []byte(line), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		// crypto/rand does not fail on supported platforms.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func writePrivateKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der)
}
