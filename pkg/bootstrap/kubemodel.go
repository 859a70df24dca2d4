package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	versioned "istio.io/client-go/pkg/clientset/versioned"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
)

// The SubjectAccessReview cache of credentialName secrets. Istio's istiod
// keeps a denial for a minute and a grant for five; one TTL serves both
// here, the shorter, so a revoked grant stops working within a minute.
const (
	secretAuthzTTL     = time.Minute
	secretAuthzEntries = sds.DefaultAuthzEntries
)

// modelSource is the mesh model read from the API server.
type modelSource interface {
	Run(ctx context.Context) error
	HasSynced() bool
}

var _ modelSource = (*kubesource.Source)(nil)

// watchModel builds the mesh model from the API server's Services,
// EndpointSlices, Pods and Istio resources, published to pub. The Istio
// clientset shares the core client's REST configuration, so its user agent
// and client-side rate limits too.
func (k *kubeParts) watchModel(pub model.Publisher, opts model.Options) error {
	if k.rest == nil {
		return errors.New("kubernetes model: no REST config")
	}
	istio, err := versioned.NewForConfig(k.rest)
	if err != nil {
		return fmt.Errorf("istio client: %w", err)
	}
	src, err := kubesource.New(kubesource.Config{
		Client:    k.client,
		Istio:     istio,
		Publisher: pub,
		Options:   opts,
		Logger:    k.log.With("component", "model"),
	})
	if err != nil {
		return fmt.Errorf("kubernetes model: %w", err)
	}
	k.model = src
	return nil
}

// secretAuthorizer decides, by SubjectAccessReview, whether a gateway's
// service account may get the Secret its credentialName names.
func (k *kubeParts) secretAuthorizer() sds.Authorizer {
	return sds.NewSARAuthorizer(k.client.AuthorizationV1().SubjectAccessReviews(), secretAuthzTTL, secretAuthzEntries, time.Now)
}
