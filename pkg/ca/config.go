package ca

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Defaults for Config fields left zero.
const (
	DefaultRootTTL        = 10 * 365 * 24 * time.Hour
	DefaultWorkloadTTL    = 24 * time.Hour
	DefaultMaxTTL         = 90 * 24 * time.Hour
	DefaultBackdate       = 2 * time.Minute
	DefaultReloadDebounce = 100 * time.Millisecond
	DefaultResyncInterval = 30 * time.Second
	DefaultRotationTick   = 10 * time.Second

	DefaultRootGracePercentile = 20
)

// Config configures a CA. Zero fields take the defaults above.
type Config struct {
	// TrustDomain is the mesh's trust domain; required. The self-signed
	// root carries it as its organization, and Sign only signs for identities
	// in it.
	TrustDomain spiffeid.TrustDomain
	// KeyType is the key type of a generated self-signed root.
	KeyType KeyType
	// RootTTL is the lifetime of a generated self-signed root.
	RootTTL time.Duration
	// CACertsDir is the plugged-in CA directory. It is watched, and may not
	// exist yet. Empty means no plugged-in CA.
	CACertsDir string
	// Store keeps the self-signed root's key material; required.
	Store Store
	// DefaultTTL is the lifetime of a workload certificate when the request
	// names none.
	DefaultTTL time.Duration
	// MaxTTL is the longest lifetime a request may ask for.
	MaxTTL time.Duration
	// Backdate moves NotBefore into the past to absorb clock skew.
	Backdate time.Duration
	// ReloadDebounce is how long the watcher waits for a burst of file
	// events to settle before re-reading CACertsDir.
	ReloadDebounce time.Duration
	// ResyncInterval is how often CACertsDir is re-read even without file
	// events.
	ResyncInterval time.Duration
	// Rotations keeps the root rotation state every replica shares; nil
	// means the self-signed root is never rotated.
	Rotations RotationStore
	// RotationPolicy is how a rotation waits for the data plane.
	RotationPolicy RotationPolicy
	// RotationTick is how often a replica reads and moves the rotation.
	RotationTick time.Duration
	// RootGracePercentile starts a rotation when less than this percentage
	// of the self-signed root's lifetime is left (Istio's
	// CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE); zero means
	// DefaultRootGracePercentile, negative never.
	RootGracePercentile int
	// Replica names this replica in a rotation's reports.
	Replica string
	// Liveness tells the replicas that run from those that are gone; nil
	// takes a replica whose report is five ticks old to be gone.
	Liveness Liveness
	// Clock returns the current time.
	Clock func() time.Time
	// Logger receives the CA's logs.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.KeyType == "" {
		c.KeyType = DefaultKeyType
	}
	setDuration(&c.RootTTL, DefaultRootTTL)
	setDuration(&c.DefaultTTL, DefaultWorkloadTTL)
	setDuration(&c.MaxTTL, DefaultMaxTTL)
	setDuration(&c.Backdate, DefaultBackdate)
	setDuration(&c.ReloadDebounce, DefaultReloadDebounce)
	setDuration(&c.ResyncInterval, DefaultResyncInterval)
	setDuration(&c.RotationTick, DefaultRotationTick)
	if c.RootGracePercentile == 0 {
		c.RootGracePercentile = DefaultRootGracePercentile
	}
	if c.Replica == "" {
		c.Replica = "istiod"
	}
	if c.Clock == nil {
		c.Clock = time.Now
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

func (c *Config) validate() error {
	if c.TrustDomain.IsZero() {
		return errors.New("trust domain is required")
	}
	if c.Store == nil {
		return errors.New("store is required")
	}
	if !c.KeyType.valid() {
		return fmt.Errorf("key type %q is not supported", c.KeyType)
	}
	for name, d := range map[string]time.Duration{
		"root ttl": c.RootTTL, "default ttl": c.DefaultTTL, "max ttl": c.MaxTTL,
		"backdate": c.Backdate, "reload debounce": c.ReloadDebounce, "resync interval": c.ResyncInterval,
		"rotation tick": c.RotationTick, "rotation grace": c.RotationPolicy.Grace, "rotation timeout": c.RotationPolicy.Timeout,
	} {
		if d < 0 {
			return fmt.Errorf("%s %s is negative", name, d)
		}
	}
	if c.RootGracePercentile >= 100 {
		return fmt.Errorf("root grace percentile %d is not below 100", c.RootGracePercentile)
	}
	if c.DefaultTTL > c.MaxTTL {
		return fmt.Errorf("default ttl %s is above max ttl %s", c.DefaultTTL, c.MaxTTL)
	}
	return nil
}
