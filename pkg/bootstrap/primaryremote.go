package bootstrap

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/inject/webhookconfig"
	"github.com/bulwark-mesh/bulwark/pkg/multicluster/controlplane"
)

// remoteBundles is the trust bundle as the remote clusters' duties need
// it: *ca.CA is one.
type remoteBundles interface {
	rootcert.BundleSource
	webhookconfig.Bundles
}

// controlRemotes builds, with --external-istiod, the controller that makes
// this istiod the control plane of the remote clusters whose istiod
// namespace is annotated topology.istio.io/controlPlaneClusters with its
// cluster ID (Istio's primary-remote): there it distributes
// istio-ca-root-cert under its own leader election and keeps the webhook
// configurations' caBundle. Without the flag, or without remote
// clusters, nothing is written into a remote cluster.
func (k *kubeParts) controlRemotes(cfg Config, bundles remoteBundles, reg prometheus.Registerer) error {
	if k.clusters == nil {
		return nil
	}
	if !cfg.ExternalIstiod {
		k.log.Info("primary-remote off (--external-istiod false, Istio's EXTERNAL_ISTIOD): remote clusters' " +
			controlplane.Annotation + " annotations are not read and nothing is written into remote clusters")
		return nil
	}
	c, err := controlplane.New(controlplane.Config{
		ClusterID:  cfg.ClusterID,
		Namespace:  k.namespace,
		Duty:       k.remoteDuty(cfg, bundles),
		Registerer: reg,
		Logger:     k.log.With("component", "controlplane"),
	})
	if err != nil {
		return fmt.Errorf("remote clusters: %w", err)
	}
	k.clusters.Notify(c)
	k.remoteControl = c
	return nil
}

// remoteDuty is what this istiod does in a remote cluster it controls,
// with the same controllers as in its own cluster: istio-ca-root-cert in
// every namespace, written by the holder of the Lease
// istio-namespace-controller-election in the remote's istiod namespace
// (so two primaries of one remote do not both write), and the caBundle
// of the injection and validation webhook configurations of the chart's
// names. The validating webhooks' failurePolicy is left as installed:
// whether the remote API server reaches this istiod is not known here.
// While it runs, a root rotation waits for the remote's ConfigMaps too
// (remoteRoots).
func (k *kubeParts) remoteDuty(cfg Config, bundles remoteBundles) controlplane.Duty {
	return func(ctx context.Context, cluster string, client kubernetes.Interface) {
		log := k.log.With("cluster", cluster)
		roots, err := rootcert.New(rootcert.Config{
			Client:    client,
			Namespace: k.namespace,
			Identity:  k.identity,
			Bundles:   bundles,
			Logger:    log,
		})
		if err != nil {
			log.Error("remote cluster: root cert distribution not started", "err", err)
			return
		}
		defer k.remoteRoots.add(cluster, roots)()
		hooks := webhookconfig.New(webhookconfig.Config{
			Client:         client,
			Bundles:        bundles,
			MutatingName:   cfg.mutatingWebhookName(),
			ValidatingName: cfg.validatingWebhookName(),
			Logger:         log.With("component", "webhookconfig"),
		})
		var wg sync.WaitGroup
		for name, run := range map[string]func(context.Context) error{"root cert distribution": roots.Run, "webhook configurations": hooks.Run} {
			wg.Go(func() {
				if err := run(ctx); err != nil {
					log.Error("remote cluster: "+name+" stopped", "err", err)
				}
			})
		}
		wg.Wait()
	}
}
