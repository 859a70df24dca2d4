package bootstrap

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/bulwark-mesh/bulwark/pkg/meshconfig"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// newNetworksWatcher watches meshNetworks (--networksConfig), starting
// from cfg.MeshNetworks, as Istio's istiod watches it: a good new version
// applies without a restart, a bad one is refused and the last good one
// keeps serving.
func newNetworksWatcher(cfg Config, metrics *meshconfig.ReloadMetrics, log *slog.Logger) (*meshconfig.NetworksWatcher, error) {
	w, err := meshconfig.NewNetworksWatcher(meshconfig.NetworksWatcherConfig{
		Path:    cfg.NetworksConfigPath(),
		Initial: cfg.MeshNetworks,
		Metrics: metrics,
		Logger:  log.With("component", "meshnetworks"),
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return w, nil
}

// networkSetter is a model source whose cluster's network can change
// (kubesource.Source).
type networkSetter interface {
	SetNetwork(network string)
}

// followNetworks places the clusters' endpoints on the networks that
// meshNetworks' fromRegistry gives them, as it changes, until ctx is
// done: the local cluster's (clusterID) and the remote clusters'. The
// network gateways follow in the xDS server, which watches the same
// meshNetworks.
func (k *kubeParts) followNetworks(ctx context.Context, w *meshconfig.NetworksWatcher, clusterID string) error {
	updates, cancel := w.Subscribe()
	defer cancel()
	apply := func(nets *model.MeshNetworks) {
		if src, ok := k.model.(networkSetter); ok {
			src.SetNetwork(nets.NetworkOfRegistry(clusterID))
		}
		if k.remoteModels != nil {
			k.remoteModels.SetNetworks(nets)
		}
	}
	apply(w.Current()) // a change between New and Subscribe
	for {
		select {
		case <-ctx.Done():
			return nil
		case nets, ok := <-updates:
			if !ok {
				return nil
			}
			apply(nets)
		}
	}
}
