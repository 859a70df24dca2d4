package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
)

// Store keeps the self-signed CA's key material: a directory in local mode
// (DirStore), the Secret istio-ca-secret on Kubernetes.
type Store interface {
	// Load returns the stored material, or an error wrapping ErrNotFound
	// when there is none.
	Load(ctx context.Context) (*KeyMaterial, error)
	// Create stores m. When material exists already, Create leaves it
	// alone and returns the existing material (the winner) and a nil error.
	Create(ctx context.Context, m *KeyMaterial) (*KeyMaterial, error)
}

// KeyMaterial is a CA set in PEM, under the same names as the keys of
// Istio's istio-ca-secret.
type KeyMaterial struct {
	CACert    []byte `json:"ca-cert.pem"`              // the signing certificate
	CAKey     []byte `json:"ca-key.pem"`               // its private key
	CertChain []byte `json:"cert-chain.pem,omitempty"` // intermediates; empty for a self-signed root
	RootCert  []byte `json:"root-cert.pem"`            // the roots
}

// root is the first certificate of root-cert.pem.
func (m *KeyMaterial) root() (*x509.Certificate, error) {
	roots, err := parseCerts(m.RootCert)
	if err != nil {
		return nil, fileErr(FileRootCert, err)
	}
	return roots[0], nil
}

// File names of a CA set.
const (
	FileCACert    = "ca-cert.pem"
	FileCAKey     = "ca-key.pem"
	FileCertChain = "cert-chain.pem"
	FileRootCert  = "root-cert.pem"
	FileTLSCert   = "tls.crt"
	FileTLSKey    = "tls.key"
	FileTLSCA     = "ca.crt"
)

// maxFileSize bounds every file of a CA set.
const maxFileSize = 1 << 20

// setFiles names where each part of a set came from, for error messages.
type setFiles struct{ cert, key, chain, roots string }

var (
	istioFiles = setFiles{cert: FileCACert, key: FileCAKey, chain: FileCertChain, roots: FileRootCert}
	tlsFiles   = setFiles{cert: FileTLSCert, key: FileTLSKey, roots: FileTLSCA}
)

// rawSet is a CA set as read, before any parsing. In the TLS layout the
// chain follows the certificate in tls.crt and files.chain is empty.
type rawSet struct {
	files                   setFiles
	cert, key, chain, roots []byte
}

func (m *KeyMaterial) rawSet() rawSet {
	return rawSet{files: istioFiles, cert: m.CACert, key: m.CAKey, chain: m.CertChain, roots: m.RootCert}
}

// errTooLarge reports a file above maxFileSize.
var errTooLarge = fmt.Errorf("file larger than %d bytes", maxFileSize)

// readBounded reads a regular file (following symlinks) of at most
// maxFileSize bytes. A missing file yields an error wrapping os.ErrNotExist.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, errTooLarge
	}
	return data, nil
}
