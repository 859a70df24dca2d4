// Package secretstore keeps the self-signed CA's key material in the
// Kubernetes Secret istio-ca-secret, in the layout Istio's istiod reads and
// writes, so that either can take over the other's root.
package secretstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// The Secret, as Istio names it.
const (
	SecretName                   = "istio-ca-secret"
	SecretType corev1.SecretType = "istio.io/ca-root"
)

// ErrInvalidSecret means istio-ca-secret exists but is not a CA set. The
// CA does not overwrite it: an operator has to repair or delete it.
var ErrInvalidSecret = errors.New("invalid istio-ca-secret")

// Store is a ca.Store in the Secret istio-ca-secret of one namespace.
//
// Create relies on the API server's create-if-absent: of several istiod
// replicas creating the Secret at once, one wins and every other one reads
// and returns the winner's set, instead of failing and restarting.
type Store struct {
	secrets   corev1client.SecretsGetter
	namespace string
}

var _ ca.Store = (*Store)(nil)

// New returns a store for istio-ca-secret in namespace. It does no I/O.
func New(secrets corev1client.SecretsGetter, namespace string) *Store {
	return &Store{secrets: secrets, namespace: namespace}
}

func (s *Store) where() string { return s.namespace + "/" + SecretName }

// String names the Secret the set is kept in.
func (s *Store) String() string { return "Secret " + s.where() }

// Load reads the Secret. It returns an error wrapping ca.ErrNotFound when
// the Secret does not exist, and one wrapping ErrInvalidSecret when it
// lacks a required key.
func (s *Store) Load(ctx context.Context) (*ca.KeyMaterial, error) {
	secret, err := s.secrets.Secrets(s.namespace).Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("load secret %s: %w", s.where(), ca.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load secret %s: %w", s.where(), err)
	}
	m, err := FromSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("load secret %s: %w", s.where(), err)
	}
	return m, nil
}

// Create creates the Secret holding m. When the Secret exists already,
// Create leaves it alone and returns the material it holds.
func (s *Store) Create(ctx context.Context, m *ca.KeyMaterial) (*ca.KeyMaterial, error) {
	secret, err := ToSecret(m)
	if err != nil {
		return nil, fmt.Errorf("create secret %s: %w", s.where(), err)
	}
	secret.Namespace = s.namespace
	_, err = s.secrets.Secrets(s.namespace).Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		winner, err := s.Load(ctx)
		if err != nil {
			return nil, fmt.Errorf("create secret %s: another writer created it first: %w", s.where(), err)
		}
		return winner, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create secret %s: %w", s.where(), err)
	}
	out := *m
	return &out, nil
}

// ToSecret returns istio-ca-secret holding m. m must carry a certificate, a
// key and roots; the chain may be empty, as it is for a self-signed root.
func ToSecret(m *ca.KeyMaterial) (*corev1.Secret, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: no key material", ErrInvalidSecret)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{ca.FileCACert, m.CACert}, {ca.FileCAKey, m.CAKey}, {ca.FileRootCert, m.RootCert}} {
		if len(bytes.TrimSpace(f.data)) == 0 {
			return nil, fmt.Errorf("%w: %s is empty", ErrInvalidSecret, f.name)
		}
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName},
		Type:       SecretType,
		Data: map[string][]byte{
			ca.FileCACert:    bytes.Clone(m.CACert),
			ca.FileCAKey:     bytes.Clone(m.CAKey),
			ca.FileCertChain: nonNil(m.CertChain),
			ca.FileRootCert:  bytes.Clone(m.RootCert),
		},
	}, nil
}

// FromSecret reads the material of an istio-ca-secret. ca-cert.pem and
// ca-key.pem are required. As Istio reads the Secret, a missing
// root-cert.pem means the signing certificate is the root, and a missing
// cert-chain.pem an empty chain. The Secret's type is not checked: Istio
// does not check it either, and an operator may have made it Opaque.
func FromSecret(secret *corev1.Secret) (*ca.KeyMaterial, error) {
	required := func(key string) ([]byte, error) {
		v, ok := secret.Data[key]
		if !ok {
			return nil, fmt.Errorf("%w: key %s is missing", ErrInvalidSecret, key)
		}
		if len(bytes.TrimSpace(v)) == 0 {
			return nil, fmt.Errorf("%w: key %s is empty", ErrInvalidSecret, key)
		}
		return bytes.Clone(v), nil
	}
	cert, err := required(ca.FileCACert)
	if err != nil {
		return nil, err
	}
	key, err := required(ca.FileCAKey)
	if err != nil {
		return nil, err
	}
	roots := bytes.Clone(secret.Data[ca.FileRootCert])
	if len(bytes.TrimSpace(roots)) == 0 {
		roots = bytes.Clone(cert)
	}
	return &ca.KeyMaterial{
		CACert:    cert,
		CAKey:     key,
		CertChain: bytes.Clone(secret.Data[ca.FileCertChain]),
		RootCert:  roots,
	}, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return bytes.Clone(b)
}
