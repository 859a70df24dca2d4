package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
)

// ResetCA deletes what holds the self-signed CA's keys where cfg keeps
// them, so that the next istiod to start makes a new root: in Kubernetes
// mode the Secrets istio-ca-rotation and istio-ca-secret in cfg.Namespace,
// locally rotation.json and istio-ca-secret in cfg.StateDir. It returns
// what it deleted. While an istiod runs on that state (locally it holds
// the state directory; in Kubernetes a replica holds the namespace
// controller's Lease) it refuses with an error wrapping
// ca.ErrIstiodRunning, as a running istiod would keep signing with the
// keys it loaded. A plugged-in CA is left alone.
func ResetCA(ctx context.Context, cfg Config, log *slog.Logger) ([]string, error) {
	cfg.setDefaults()
	if !cfg.KubernetesMode() {
		return ca.ResetDir(ctx, cfg.StateDir)
	}
	k, err := newKubeParts(cfg, cfg.PodName, log)
	if err != nil {
		return nil, err
	}
	holder, err := rootcert.Holder(ctx, k.direct.CoordinationV1(), cfg.Namespace, time.Now())
	if err != nil {
		return nil, fmt.Errorf("reset: is istiod running? %w", err)
	}
	if holder != "" {
		return nil, fmt.Errorf("reset: %w in namespace %s (replica %s holds the Lease %s): scale it to zero first",
			ca.ErrIstiodRunning, cfg.Namespace, holder, rootcert.LeaseName)
	}
	return secretstore.Reset(ctx, k.direct.CoreV1(), cfg.Namespace)
}
