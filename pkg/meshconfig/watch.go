package meshconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
)

// DefaultResync is how often the file is read again in case a change
// notification was missed.
const DefaultResync = 10 * time.Second

// ReadFile reads and parses the mesh configuration file at path. A missing
// file is the defaults, as in Istio.
func ReadFile(path string, d Defaults) (mc *meshv1alpha1.MeshConfig, warnings []string, err error) {
	data, err := dirwatch.ReadFile(path, MaxBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(d), nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	mc, warnings, err = Parse(data, d)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return mc, warnings, nil
}

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Path is the mesh configuration file. Its directory is watched, so
	// Kubernetes' swap of a mounted ConfigMap's ..data link is seen.
	Path     string
	Defaults Defaults
	// Initial is the configuration istiod started with (ReadFile's); nil
	// means Default(Defaults). Its trust domain is the one istiod runs
	// with: certificates and identities cannot change trust domain while
	// istiod runs, so a later change of trustDomain is logged and takes
	// effect at the next start.
	Initial *meshv1alpha1.MeshConfig
	// Check, when set, is a further rule an update must pass (the
	// injector's rules for defaultConfig, for example).
	Check func(*meshv1alpha1.MeshConfig) error
	// Resync is how often the file is read again besides change
	// notifications; zero means DefaultResync.
	Resync time.Duration
	// Metrics, when set, counts the reloads (config="mesh").
	Metrics *ReloadMetrics
	Logger  *slog.Logger
}

// meshConfig names the mesh configuration in the reload metrics.
const meshConfig = "mesh"

// Watcher holds the current mesh configuration and announces changes. The
// configurations it hands out are shared and must not be modified.
type Watcher struct {
	fileValue[*meshv1alpha1.MeshConfig]
	cfg         WatcherConfig
	trustDomain string
	last        string // the last outcome logged, so a resync does not repeat it
}

// NewWatcher returns a watcher of cfg.Path. It does no I/O: until Run
// reads the file, Current is cfg.Initial.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	initial := cfg.Initial
	if initial == nil {
		initial = Default(cfg.Defaults)
	}
	if err := Validate(initial); err != nil {
		return nil, fmt.Errorf("meshconfig: initial configuration: %w", err)
	}
	w := &Watcher{cfg: cfg, trustDomain: initial.GetTrustDomain()}
	if err := w.init(cfg.Path, cfg.Resync, cfg.Logger, initial); err != nil {
		return nil, err
	}
	cfg.Metrics.rejected(meshConfig, false)
	return w, nil
}

// Run reads the file now, on every change and every Resync, until ctx is
// done.
func (w *Watcher) Run(ctx context.Context) error {
	w.watch(ctx, w.reload)
	return nil
}

// reload reads the file and, when it holds a valid configuration other
// than the current one, makes it current. Only Run's goroutine calls it.
func (w *Watcher) reload() {
	mc, warnings, err := ReadFile(w.path, w.cfg.Defaults)
	if err == nil && w.cfg.Check != nil {
		err = w.cfg.Check(mc)
	}
	w.cfg.Metrics.rejected(meshConfig, err != nil)
	if err != nil {
		last := w.last
		w.report(note{slog.LevelError, "mesh configuration rejected; the last good one keeps serving", []any{"file", w.path, "err", err}})
		if w.last != last {
			w.cfg.Metrics.count(meshConfig, resultRejected)
		}
		return
	}
	var notes []note
	for _, warn := range warnings {
		notes = append(notes, note{slog.LevelWarn, "mesh configuration has fields this istiod does not read", []any{"file", w.path, "warning", warn}})
	}
	if ignored := NotHonoured(mc); len(ignored) > 0 {
		notes = append(notes, note{slog.LevelWarn, "mesh configuration sets fields istiod does not act on; they have no effect", []any{"file", w.path, "fields", ignored}})
	}
	if td := mc.GetTrustDomain(); td != w.trustDomain {
		notes = append(notes, note{slog.LevelWarn, "mesh configuration names another trust domain; istiod keeps the one it started with until it restarts, as its CA and every identity it issued belong to it",
			[]any{"file", w.path, "trust_domain", w.trustDomain, "configured", td}})
		mc.TrustDomain = w.trustDomain
	}
	if proto.Equal(mc, w.Current()) {
		if len(notes) == 0 && w.last != "" {
			notes = append(notes, note{slog.LevelInfo, "mesh configuration file is valid again; the configuration in force is unchanged", []any{"file", w.path}})
		}
		w.report(notes...)
		return
	}
	// What a reload has to say is logged before subscribers see the
	// configuration, so a log line never comes after what it explains.
	w.last = ""
	w.report(notes...)
	w.cfg.Metrics.count(meshConfig, resultApplied)
	w.log.Info("mesh configuration loaded", append([]any{"file", w.path}, Summary(mc)...)...)
	w.current.Store(mc)
}

// note is one thing a reload has to say.
type note struct {
	level slog.Level
	msg   string
	args  []any
}

// report logs notes unless they are what the last reload said, so that a
// resync does not repeat them.
func (w *Watcher) report(notes ...note) {
	key := ""
	for _, n := range notes {
		key += fmt.Sprint(n.level, n.msg, n.args) + "\x00"
	}
	if key == w.last {
		return
	}
	w.last = key
	for _, n := range notes {
		w.log.Log(context.Background(), n.level, n.msg, n.args...)
	}
}

// Summary is the fields Bulwark reads, as log attributes.
func Summary(mc *meshv1alpha1.MeshConfig) []any {
	return []any{
		"trust_domain", mc.GetTrustDomain(),
		"trust_domain_aliases", mc.GetTrustDomainAliases(),
		"root_namespace", mc.GetRootNamespace(),
		"enable_auto_mtls", mc.GetEnableAutoMtls() == nil || mc.GetEnableAutoMtls().GetValue(),
		"outbound_traffic_policy", mc.GetOutboundTrafficPolicy().GetMode().String(),
		"discovery_address", mc.GetDefaultConfig().GetDiscoveryAddress(),
	}
}
