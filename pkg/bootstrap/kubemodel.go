package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	versioned "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/clusters"
	"github.com/bulwark-mesh/bulwark/pkg/model/kubesource"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported"
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
// EndpointSlices, Pods and Istio resources, published to pub, its
// endpoints of cluster clusterID. The Istio clientset shares the core
// client's REST configuration, so its user agent and client-side rate
// limits too. With a registry of remote clusters, each remote cluster's
// Services, EndpointSlices and Pods join the model (package clusters),
// whose metric reg serves. Each cluster's endpoints are on the network
// of nets whose fromRegistry names it, unless their pod names another or
// the cluster's namespace systemNS does (its topology.istio.io/network
// label, which wins over meshNetworks, as in Istio).
func (k *kubeParts) watchModel(pub model.Publisher, opts model.Options, clusterID, systemNS string, nets *model.MeshNetworks, reg prometheus.Registerer) error {
	if k.rest == nil {
		return errors.New("kubernetes model: no REST config")
	}
	istio, err := versioned.NewForConfig(k.rest)
	if err != nil {
		return fmt.Errorf("istio client: %w", err)
	}
	if k.clusters != nil {
		merger, err := clusters.New(pub, k.log.With("component", "model"), reg)
		if err != nil {
			return fmt.Errorf("kubernetes model: %w", err)
		}
		k.remoteModels = clusters.NewSourcesWithNetworks(merger, opts, nets, k.log.With("component", "model"))
		k.remoteModels.SetSystemNamespace(systemNS)
		k.clusters.Notify(k.remoteModels)
		pub = merger.Local()
	}
	src, err := kubesource.New(kubesource.Config{
		Client:    k.client,
		Istio:     istio,
		Publisher: pub,
		Options:   opts,
		Logger:    k.log.With("component", "model"),
		ClusterID: clusterID,
		Network:   nets.NetworkOfRegistry(clusterID),
		// Istio's istiod reads its own namespace's network label.
		SystemNamespace: systemNS,
	})
	if err != nil {
		return fmt.Errorf("kubernetes model: %w", err)
	}
	k.model = src
	return nil
}

// reportUnsupported builds the reporter of the Istio and Gateway API
// objects the model does not honour in full, whose gauge reg serves. Its
// clients share the core client's REST configuration.
func (k *kubeParts) reportUnsupported(reg prometheus.Registerer) (*unsupported.Reporter, error) {
	if k.rest == nil {
		return nil, errors.New("unsupported-config reporter: no REST config")
	}
	dyn, err := dynamic.NewForConfig(k.rest)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(k.rest)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	r := unsupported.New(unsupported.Config{
		Discovery: k.client.Discovery(),
		Dynamic:   dyn,
		Metadata:  meta,
		Logger:    k.log.With("component", "unsupported"),
	})
	if err := reg.Register(r.Collector()); err != nil {
		return nil, fmt.Errorf("unsupported-config reporter: %w", err)
	}
	return r, nil
}

// secretAuthorizer decides, by SubjectAccessReview, whether a gateway's
// service account may get the Secret its credentialName names.
func (k *kubeParts) secretAuthorizer() sds.Authorizer {
	return sds.NewSARAuthorizer(k.direct.AuthorizationV1().SubjectAccessReviews(), secretAuthzTTL, secretAuthzEntries, time.Now)
}
