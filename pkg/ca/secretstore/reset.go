package secretstore

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// ResetSecrets are the Secrets that hold the self-signed CA's keys, in the
// order Reset deletes them: the rotation state first, as without it the
// set in istio-ca-secret signs, so that an interrupted reset never leaves
// a rotation's key signing over a new istio-ca-secret.
var ResetSecrets = []string{RotationSecretName, SecretName}

// Reset deletes ResetSecrets in namespace, for starting over with a new
// root, and returns those it deleted (an absent one is not an error). It
// first asks the API server, in a dry run, whether every deletion is
// allowed, so that a caller allowed only some deletes none. A plugged-in
// CA's Secret (cacerts) is the operator's and is left alone.
func Reset(ctx context.Context, secrets corev1client.SecretsGetter, namespace string) (deleted []string, err error) {
	api := secrets.Secrets(namespace)
	for _, dryRun := range []bool{true, false} {
		opts := metav1.DeleteOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		for _, name := range ResetSecrets {
			err := api.Delete(ctx, name, opts)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return deleted, fmt.Errorf("reset: delete secret %s/%s: %w", namespace, name, err)
			case !dryRun:
				deleted = append(deleted, namespace+"/"+name)
			}
		}
	}
	return deleted, nil
}
