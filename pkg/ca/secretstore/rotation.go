package secretstore

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// The Secret that holds a root rotation under way, beside istio-ca-secret
// (which a rotation never rewrites).
const (
	RotationSecretName = "istio-ca-rotation"
	rotationKey        = "rotation.json"
)

// RotationStore is a ca.RotationStore in the Secret istio-ca-rotation of
// one namespace. Its revision is the Secret's resourceVersion, so the API
// server's optimistic concurrency makes Save a compare-and-swap between
// replicas.
type RotationStore struct {
	secrets   corev1client.SecretsGetter
	namespace string
}

var _ ca.RotationStore = (*RotationStore)(nil)

// NewRotationStore returns a store in namespace. It does no I/O.
func NewRotationStore(secrets corev1client.SecretsGetter, namespace string) *RotationStore {
	return &RotationStore{secrets: secrets, namespace: namespace}
}

func (s *RotationStore) where() string { return s.namespace + "/" + RotationSecretName }

// String names the Secret the rotation state is kept in.
func (s *RotationStore) String() string { return "Secret " + s.where() }

// Load reads the Secret; none means no rotation under way.
func (s *RotationStore) Load(ctx context.Context) (*ca.Rotation, string, error) {
	secret, err := s.secrets.Secrets(s.namespace).Get(ctx, RotationSecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("load rotation %s: %w", s.where(), err)
	}
	r, err := ca.UnmarshalRotation(secret.Data[rotationKey])
	if err != nil {
		return nil, "", fmt.Errorf("load rotation %s: %w", s.where(), err)
	}
	return r, secret.ResourceVersion, nil
}

// Save writes r if the Secret is still at revision ("" for absent); a nil
// r deletes it.
func (s *RotationStore) Save(ctx context.Context, r *ca.Rotation, revision string) (string, error) {
	api := s.secrets.Secrets(s.namespace)
	conflict := func(err error) (string, error) {
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
			return "", fmt.Errorf("save rotation %s: %w", s.where(), ca.ErrRotationConflict)
		}
		return "", fmt.Errorf("save rotation %s: %w", s.where(), err)
	}
	if r == nil {
		if revision == "" { // nothing to delete, if nothing was written meanwhile
			_, cur, err := s.Load(ctx)
			if err != nil {
				return "", err
			}
			if cur != "" {
				return "", fmt.Errorf("save rotation %s: %w", s.where(), ca.ErrRotationConflict)
			}
			return "", nil
		}
		err := api.Delete(ctx, RotationSecretName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &revision}})
		if err != nil {
			return conflict(err)
		}
		return "", nil
	}
	b, err := ca.MarshalRotation(r)
	if err != nil {
		return "", fmt.Errorf("save rotation %s: %w", s.where(), err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: RotationSecretName, Namespace: s.namespace, ResourceVersion: revision},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{rotationKey: b},
	}
	var out *corev1.Secret
	if revision == "" {
		out, err = api.Create(ctx, secret, metav1.CreateOptions{})
	} else {
		out, err = api.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return conflict(err)
	}
	return out.ResourceVersion, nil
}
