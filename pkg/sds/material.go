package sds

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	corev1 "k8s.io/api/core/v1"
)

// DefaultMaxSecretSize bounds the data of one Kubernetes Secret served.
const DefaultMaxSecretSize = 1 << 20

// Errors of secret material, logged with the secret's name.
var (
	ErrTooLarge     = errors.New("secret data too large")
	ErrNoMaterial   = errors.New("secret has no certificate and key")
	ErrNoCA         = errors.New("secret has no CA certificate")
	ErrBadPEM       = errors.New("invalid PEM")
	ErrKeyMismatch  = errors.New("private key does not match the certificate")
	errNotFound     = errors.New("secret not found")
	errCrossNS      = errors.New("secret is in another namespace than the proxy")
	errUnauthorized = errors.New("proxy's service account may not read the secret")
	errPlaintext    = errors.New("secrets are not served to plaintext or unauthenticated streams")
	// errRemoteCluster: the reader of a proxy's remote cluster may not
	// list its Secrets or create SubjectAccessReviews there (the chart's
	// global.readerSecrets grants both).
	errRemoteCluster = errors.New("the remote cluster's reader may not read its secrets (chart value global.readerSecrets)")
	// errUnknownCluster: the proxy's cluster is not registered (its remote
	// secret is gone).
	errUnknownCluster = errors.New("the proxy's cluster is not registered")
	// errListForbidden: listing a namespace's Secrets was forbidden.
	errListForbidden = errors.New("listing secrets is forbidden")
	// errReviewForbidden: creating a SubjectAccessReview was forbidden.
	errReviewForbidden = errors.New("creating subject access reviews is forbidden")
)

// Data keys of kubernetes.io/tls Secrets and of Istio's generic ones.
var (
	certKeys = []string{corev1.TLSCertKey, "cert"}
	keyKeys  = []string{corev1.TLSPrivateKeyKey, "key"}
	caKeys   = []string{"ca.crt", "cacert"}
)

func first(data map[string][]byte, keys []string) []byte {
	for _, k := range keys {
		if v := data[k]; len(v) > 0 {
			return v
		}
	}
	return nil
}

func dataSize(s *corev1.Secret) int {
	n := 0
	for k, v := range s.Data {
		n += len(k) + len(v)
	}
	return n
}

// certificate builds the TlsCertificate resource from s, after checking
// that the chain parses and the key matches its leaf.
func certificate(resource string, s *corev1.Secret, maxSize int) (*tlsv3.Secret, error) {
	if dataSize(s) > maxSize {
		return nil, ErrTooLarge
	}
	certPEM, keyPEM := first(s.Data, certKeys), first(s.Data, keyKeys)
	if certPEM == nil || keyPEM == nil {
		return nil, ErrNoMaterial
	}
	if _, err := parseCerts(certPEM); err != nil {
		return nil, fmt.Errorf("certificate chain: %w", err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyMismatch, err)
	}
	return &tlsv3.Secret{
		Name: resource,
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inline(certPEM),
			PrivateKey:       inline(keyPEM),
		}},
	}, nil
}

// validation builds the ValidationContext resource from s's CA certificates.
func validation(resource string, s *corev1.Secret, maxSize int) (*tlsv3.Secret, error) {
	if dataSize(s) > maxSize {
		return nil, ErrTooLarge
	}
	caPEM := first(s.Data, caKeys)
	if caPEM == nil {
		return nil, ErrNoCA
	}
	if _, err := parseCerts(caPEM); err != nil {
		return nil, fmt.Errorf("ca certificates: %w", err)
	}
	return trustedCA(resource, caPEM), nil
}

func trustedCA(resource string, caPEM []byte) *tlsv3.Secret {
	return &tlsv3.Secret{
		Name: resource,
		Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(caPEM),
		}},
	}
}

func inline(b []byte) *core.DataSource {
	return &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: b}}
}

// parseCerts parses every CERTIFICATE block of b; anything else in b, or
// no certificate at all, is an error.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: unexpected block %q", ErrBadPEM, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadPEM, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no certificate", ErrBadPEM)
	}
	return out, nil
}
