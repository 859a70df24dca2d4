package rootcert

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Holder returns the replica that holds the Lease in namespace at now, ""
// when none does: the Lease was never taken, was released (as a stopping
// istiod releases it), or expired (a crashed istiod's, LeaseDuration after
// its last renewal). Every running istiod campaigns for the Lease, so a
// holder means one runs.
func Holder(ctx context.Context, leases coordinationv1client.LeasesGetter, namespace string, now time.Time) (string, error) {
	lease, err := leases.Leases(namespace).Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("lease %s/%s: %w", namespace, LeaseName, err)
	}
	spec := lease.Spec
	if spec.HolderIdentity == nil || *spec.HolderIdentity == "" || spec.RenewTime == nil || spec.LeaseDurationSeconds == nil {
		return "", nil
	}
	expires := spec.RenewTime.Add(time.Duration(*spec.LeaseDurationSeconds) * time.Second)
	if !now.Before(expires) {
		return "", nil
	}
	return *spec.HolderIdentity, nil
}
