package bootstrap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bulwark-mesh/bulwark/internal/kubewatch"
	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/replicalease"
	"github.com/bulwark-mesh/bulwark/pkg/ca/rootcert"
	"github.com/bulwark-mesh/bulwark/pkg/ca/secretstore"
	"github.com/bulwark-mesh/bulwark/pkg/inject/webhookconfig"
	"github.com/bulwark-mesh/bulwark/pkg/model/clusters"
	"github.com/bulwark-mesh/bulwark/pkg/multicluster"
	"github.com/bulwark-mesh/bulwark/pkg/multicluster/controlplane"
)

// Client-side rate limits towards the API server. client-go's defaults (5
// QPS, burst 10) would take minutes to write a ConfigMap into a few
// thousand namespaces; these are Istio's istiod defaults.
const (
	kubeQPS   = 80
	kubeBurst = 160
)

// caLoadBackoff spaces the attempts to load the CA while the API server
// cannot be reached or refuses: from first to max, doubling, with jitter.
type caLoadBackoff struct {
	first, max time.Duration
	// attemptTimeout bounds one attempt.
	attemptTimeout time.Duration
}

var defaultCALoadBackoff = caLoadBackoff{first: 500 * time.Millisecond, max: 30 * time.Second, attemptTimeout: 15 * time.Second}

// kubeParts are istiod's Kubernetes-mode components: the client, the CA
// store in istio-ca-secret and, once the CA exists, the root certificate
// distribution and, without --configDir, the mesh model.
type kubeParts struct {
	// client is behind gate: the components that watch the API server
	// (informers) use it, so that their lists and watches wait out an
	// outage instead of backing off past its end.
	client kubernetes.Interface
	// direct is not behind gate: the CA's stores and Leases read through
	// it and see an outage as an error at once, as does the monitor's
	// probe. The same as client when built from a client alone.
	direct kubernetes.Interface
	// rest is client's configuration, for the clients of other API
	// groups; nil when built from a client alone.
	rest      *rest.Config
	gate      *kubewatch.Gate
	store     *secretstore.Store
	rotations *secretstore.RotationStore
	// replicas keeps this replica's Lease and tells the replicas that run,
	// for a root rotation; nil in commands that do not run one.
	replicas  *replicalease.Registry
	rootCerts *rootcert.Controller
	webhooks  *webhookconfig.Controller
	model     modelSource // nil when the model comes from files
	// clusters are the remote clusters of the remote secrets; nil in
	// commands that authenticate no one.
	clusters *multicluster.Controller
	// remoteModels read the remote clusters' services into the model; nil
	// without remote clusters or a model from the API server.
	remoteModels *clusters.Sources
	// remoteControl runs this istiod's duties in the remote clusters it
	// controls (primary-remote); nil without --external-istiod.
	remoteControl *controlplane.Controller
	// remoteRoots are the root ConfigMaps of the remotes it controls, for
	// root rotation.
	remoteRoots remoteRoots
	// monitor says when the API server becomes unreachable and is back.
	monitor   *apiserverMonitor
	identity  string
	namespace string
	log       *slog.Logger
	backoff   caLoadBackoff
}

// newKubeParts builds the client and the CA store. It reads the kubeconfig
// file (or the in-cluster service account) but does not contact the API
// server. identity names this replica in leader election; empty means the
// host name.
func newKubeParts(cfg Config, identity string, log *slog.Logger) (*kubeParts, error) {
	rc, err := kubeRESTConfig(cfg)
	if err != nil {
		return nil, err
	}
	direct, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	gate := kubewatch.NewGate()
	gated := rest.CopyConfig(rc)
	gated.Wrap(gate.Transport)
	client, err := kubernetes.NewForConfig(gated)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	k := newKubePartsWithClient(client, cfg.Namespace, identity, log)
	k.direct, k.rest, k.gate = direct, gated, gate
	k.store = secretstore.New(direct.CoreV1(), cfg.Namespace)
	k.rotations = secretstore.NewRotationStore(direct.CoreV1(), cfg.Namespace)
	return k, nil
}

func newKubePartsWithClient(client kubernetes.Interface, namespace, identity string, log *slog.Logger) *kubeParts {
	identity = replicaName(identity)
	return &kubeParts{
		client:    client,
		direct:    client,
		gate:      kubewatch.NewGate(),
		store:     secretstore.New(client.CoreV1(), namespace),
		rotations: secretstore.NewRotationStore(client.CoreV1(), namespace),
		identity:  identity,
		namespace: namespace,
		log:       log,
		backoff:   defaultCALoadBackoff,
	}
}

// kubeRESTConfig returns the API server's address and credentials: the
// kubeconfig file when one is named, else the pod's service account.
func kubeRESTConfig(cfg Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.UserAgent = "istiod" // also the field manager of its writes
	rc.QPS, rc.Burst = kubeQPS, kubeBurst
	return rc, nil
}

// distributeRoots builds the controller that publishes bundles to every
// namespace as istio-ca-root-cert.
func (k *kubeParts) distributeRoots(bundles rootcert.BundleSource) error {
	c, err := rootcert.New(rootcert.Config{
		Client:    k.client,
		Namespace: k.namespace,
		Identity:  k.identity,
		Bundles:   bundles,
		Logger:    k.log,
	})
	if err != nil {
		return fmt.Errorf("root cert distribution: %w", err)
	}
	k.rootCerts = c
	return nil
}

// keepWebhooks builds the controller that keeps the webhook configurations'
// caBundle equal to the trust bundle and switches validation to fail closed
// once istiod answers (ready).
func (k *kubeParts) keepWebhooks(cfg Config, bundles webhookconfig.Bundles, ready func() bool) {
	k.webhooks = webhookconfig.New(webhookconfig.Config{
		Client:         k.client,
		Bundles:        bundles,
		MutatingName:   cfg.mutatingWebhookName(),
		ValidatingName: cfg.validatingWebhookName(),
		Ready:          ready,
		Logger:         k.log.With("component", "webhookconfig"),
	})
}

// synced reports whether the Kubernetes caches are filled: the
// namespaces of the root certificate distribution and the mesh model.
func (k *kubeParts) synced() bool {
	return (k.rootCerts == nil || k.rootCerts.HasSynced()) && (k.model == nil || k.model.HasSynced()) && k.remotesSynced()
}

// remotesSynced reports whether the remote clusters of the remote secrets
// present at startup are in the model, or have had their time
// (--remote-cluster-timeout), as Istio's istiod waits for them.
func (k *kubeParts) remotesSynced() bool {
	if k.clusters == nil {
		return true
	}
	var inModel func(string) bool
	if k.remoteModels != nil {
		inModel = k.remoteModels.Synced
	}
	return k.clusters.StartupSynced(inModel)
}

// run runs the root certificate distribution, the webhook configuration
// controller and the mesh model until ctx is done.
func (k *kubeParts) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if k.rootCerts != nil {
		g.Go(func() error { return k.rootCerts.Run(ctx) })
	}
	if k.model != nil {
		g.Go(func() error { return k.model.Run(ctx) })
	}
	if k.webhooks != nil {
		g.Go(func() error { return k.webhooks.Run(ctx) })
	}
	if k.clusters != nil {
		g.Go(func() error { return k.clusters.Run(ctx) })
	}
	if k.remoteModels != nil {
		g.Go(func() error { return k.remoteModels.Run(ctx) })
	}
	if k.remoteControl != nil {
		g.Go(func() error { return k.remoteControl.Run(ctx) })
	}
	if k.monitor != nil {
		g.Go(func() error { return k.monitor.Run(ctx) })
	}
	if k.replicas != nil {
		g.Go(func() error { return k.replicas.Run(ctx) })
	}
	g.Go(func() error { <-ctx.Done(); return nil })
	return g.Wait()
}

// caRunner is the part of *ca.CA that runCA drives.
type caRunner interface {
	Load(ctx context.Context) error
	Run(ctx context.Context) error
}

var _ caRunner = (*ca.CA)(nil)

// runCA loads the CA, retrying while the API server is unreachable or
// refuses (istiod stays unready meanwhile, rather than exiting), then runs
// it until ctx is done.
func (k *kubeParts) runCA(ctx context.Context, authority caRunner) error {
	delay := k.backoff.first
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, k.backoff.attemptTimeout)
		err := authority.Load(actx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := delay/2 + rand.N(delay/2+1) // jitter: [delay/2, delay]
		k.log.Warn("cannot load the CA; istiod stays unready and retries", "component", "ca",
			"namespace", k.namespace, "secret", secretstore.SecretName, "attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		delay = min(delay*2, k.backoff.max)
	}
	if err := authority.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// announceReplica builds the Lease this replica renews every tick, named
// after it, by which the other replicas tell it runs while it cannot write
// the rotation state.
func (k *kubeParts) announceReplica(tick time.Duration) error {
	tick = cmp.Or(tick, ca.DefaultRotationTick)
	r, err := replicalease.New(replicalease.Config{
		Client:    k.direct,
		Namespace: k.namespace,
		Name:      k.identity,
		Renew:     tick,
		Lifetime:  ca.StaleReports * tick,
		Logger:    k.log.With("component", "ca"),
	})
	if err != nil {
		return err
	}
	k.replicas = r
	return nil
}

// caStores are where the self-signed root and the root rotation state
// live: istio-ca-secret and istio-ca-rotation in Kubernetes mode, the
// state directory otherwise; and what tells the replicas that run: their
// Leases and pods in Kubernetes mode, nothing locally (one process).
func caStores(cfg Config, kube *kubeParts) (ca.Store, ca.RotationStore, ca.Liveness) {
	if kube != nil {
		var live ca.Liveness
		if kube.replicas != nil {
			live = kube.replicas
		}
		return kube.store, kube.rotations, live
	}
	return ca.NewDirStore(cfg.StateDir), ca.NewDirRotationStore(cfg.StateDir), nil
}

// runCA runs the CA; in Kubernetes mode it first waits out an unreachable
// API server instead of failing.
func (s *Server) runCA(ctx context.Context) error {
	if s.kube != nil {
		return s.kube.runCA(ctx, s.ca)
	}
	return s.ca.Run(ctx)
}

// kubeSynced reports whether the Kubernetes caches are filled; true in
// local mode.
func (s *Server) kubeSynced() bool { return s.kube == nil || s.kube.synced() }

// replicaName names this replica: its pod name, else the host name.
func replicaName(podName string) string {
	if podName != "" {
		return podName
	}
	if h, _ := os.Hostname(); h != "" {
		return h
	}
	return "istiod"
}

// watchRemoteClusters builds the registry of remote clusters, read from
// Istio's remote secrets in istiod's namespace.
func (k *kubeParts) watchRemoteClusters(cfg Config, reg prometheus.Registerer) error {
	c, err := multicluster.New(multicluster.Config{
		Client:         k.client,
		Namespace:      k.namespace,
		LocalClusterID: cfg.ClusterID,
		Aliases:        cfg.ClusterAliases,
		SyncTimeout:    cfg.RemoteClusterTimeout,
		Registerer:     reg,
		Logger:         k.log.With("component", "multicluster"),
	})
	if err != nil {
		return fmt.Errorf("remote clusters: %w", err)
	}
	k.clusters = c
	return nil
}

// remoteReviewers reviews a token of a remote cluster in that cluster's
// API server; nil without a registry of remote clusters.
func (k *kubeParts) remoteReviewers() authn.RemoteReviewers {
	if k.clusters == nil {
		return nil
	}
	return authn.RemoteReviewersFunc(func(id string) (authn.TokenReviewer, bool) {
		client, ok := k.clusters.Client(id)
		if !ok {
			return nil, false
		}
		return authn.NewClientGoReviewer(client), true
	})
}
