// Command mkcerts makes a sample root CA and an intermediate CA signed by it,
// laid out as Istio's cacerts (ca-cert.pem, ca-key.pem, cert-chain.pem,
// root-cert.pem), for trying out istiod's plugged-in CA. Demo material only:
// a production root belongs offline.
package main

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

func main() {
	out := flag.String("out", "certs/out", "output directory")
	org := flag.String("org", "cluster.local", "subject organization (the trust domain)")
	cluster := flag.String("cluster", "cluster1", "name of the intermediate (one per cluster)")
	flag.Parse()
	if err := run(*out, *org, *cluster); err != nil {
		fmt.Fprintln(os.Stderr, "mkcerts:", err)
		os.Exit(1)
	}
}

func run(out, org, cluster string) error {
	now := time.Now()
	rootKey, err := ca.GenerateKey(ca.KeyTypeECDSAP256)
	if err != nil {
		return err
	}
	root, err := issue(&x509.Certificate{
		Subject:   pkix.Name{Organization: []string{org}, CommonName: "Root CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
	}, nil, rootKey.Public(), rootKey)
	if err != nil {
		return err
	}
	interKey, err := ca.GenerateKey(ca.KeyTypeECDSAP256)
	if err != nil {
		return err
	}
	inter, err := issue(&x509.Certificate{
		Subject:   pkix.Name{Organization: []string{org}, CommonName: "Intermediate CA " + cluster},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(5, 0, 0),
		MaxPathLen: 0, MaxPathLenZero: true,
	}, root, interKey.Public(), rootKey)
	if err != nil {
		return err
	}

	rootPEM := certPEM(root)
	interPEM := certPEM(inter)
	dir := filepath.Join(out, cluster)
	files := map[string][]byte{
		filepath.Join(out, "root-cert.pem"):  rootPEM,
		filepath.Join(out, "root-key.pem"):   keyPEM(rootKey),
		filepath.Join(dir, "ca-cert.pem"):    interPEM,
		filepath.Join(dir, "ca-key.pem"):     keyPEM(interKey),
		filepath.Join(dir, "cert-chain.pem"): append(append([]byte{}, interPEM...), rootPEM...),
		filepath.Join(dir, "root-cert.pem"):  rootPEM,
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for path, data := range files {
		mode := os.FileMode(0o644)
		if filepath.Base(path) == "ca-key.pem" || filepath.Base(path) == "root-key.pem" {
			mode = 0o600
		}
		if err := os.WriteFile(path, data, mode); err != nil {
			return err
		}
	}
	fmt.Printf("wrote a root CA to %s and intermediate %q to %s\n", out, cluster, dir)
	fmt.Printf("plug it into a running local istiod: cp %s/* .istiod/cacerts/\n", dir)
	return nil
}

// issue signs a CA certificate; parent nil means self-signed.
func issue(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", tmpl.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(k crypto.Signer) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err) // keys from ca.GenerateKey always marshal
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
