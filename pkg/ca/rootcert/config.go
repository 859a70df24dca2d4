package rootcert

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// Names as Istio uses them, so that sidecars, charts and RBAC need no change.
const (
	// ConfigMapName is the ConfigMap kept in every namespace.
	ConfigMapName = "istio-ca-root-cert"
	// DataKey is the ConfigMap key holding the PEM trust bundle.
	DataKey = "root-cert.pem"
	// ConfigLabel marks the ConfigMap as Istio configuration.
	ConfigLabel = "istio.io/config"
	// LeaseName is the coordination.k8s.io Lease of the replica that writes.
	LeaseName = "istio-namespace-controller-election"
)

// Defaults for Config fields left zero. The lease timings are those of
// Kubernetes' own controllers: a crashed leader is replaced within about
// LeaseDuration, a cancelled one (which releases the Lease) within about
// RetryPeriod.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultWorkers       = 2
)

// DefaultExcludedNamespaces get no ConfigMap, as in Istio.
var DefaultExcludedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// BundleSource publishes the trust bundle; *ca.CA is one.
type BundleSource interface {
	// Subscribe returns a channel of bundles, the current one first, and a
	// function that stops delivery.
	Subscribe() (updates <-chan *ca.Bundle, cancel func())
}

// Config configures a Controller.
type Config struct {
	// Client talks to the API server; required.
	Client kubernetes.Interface
	// Namespace is istiod's namespace, where the Lease lives; required.
	Namespace string
	// Identity names this replica in the Lease, e.g. its pod name; required.
	// A random suffix is added, so that two processes never share one.
	Identity string
	// Bundles is the trust bundle to distribute; required.
	Bundles BundleSource
	// ExcludedNamespaces get no ConfigMap. Default: DefaultExcludedNamespaces.
	ExcludedNamespaces []string
	// NamespaceSelector is a label selector ("env=prod,team!=a"); when set,
	// only the namespaces it selects get a ConfigMap, as with Istio's
	// discoverySelectors. Empty selects every namespace.
	NamespaceSelector string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader election.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Workers is the number of namespaces reconciled at once.
	Workers int
	// Logger receives the controller's logs.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.ExcludedNamespaces == nil {
		c.ExcludedNamespaces = DefaultExcludedNamespaces
	}
	c.ExcludedNamespaces = slices.Clone(c.ExcludedNamespaces)
	setDuration(&c.LeaseDuration, DefaultLeaseDuration)
	setDuration(&c.RenewDeadline, DefaultRenewDeadline)
	setDuration(&c.RetryPeriod, DefaultRetryPeriod)
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

// validate repeats the leader elector's own checks, so that a bad config
// fails in New rather than in Run.
func (c *Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("client is required")
	case c.Namespace == "":
		return errors.New("namespace is required")
	case c.Identity == "":
		return errors.New("identity is required")
	case c.Bundles == nil:
		return errors.New("bundle source is required")
	case c.Workers < 0:
		return fmt.Errorf("workers %d is negative", c.Workers)
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("lease duration %s must exceed renew deadline %s", c.LeaseDuration, c.RenewDeadline)
	case c.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(c.RetryPeriod)):
		return fmt.Errorf("renew deadline %s must exceed %.1f × retry period %s", c.RenewDeadline, leaderelection.JitterFactor, c.RetryPeriod)
	case c.RetryPeriod < 0:
		return fmt.Errorf("retry period %s is negative", c.RetryPeriod)
	}
	return nil
}

// selector parses NamespaceSelector.
func (c *Config) selector() (labels.Selector, error) {
	sel, err := labels.Parse(c.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("namespace selector %q: %w", c.NamespaceSelector, err)
	}
	return sel, nil
}

// uniqueIdentity appends a random suffix to base.
func uniqueIdentity(base string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base + "_" + hex.EncodeToString(b)
}
