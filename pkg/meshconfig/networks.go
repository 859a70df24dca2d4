package meshconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// ReadNetworksFile reads and parses the meshNetworks file at path. A
// missing file is no networks, as in Istio.
func ReadNetworksFile(path string) (*model.MeshNetworks, error) {
	data, err := dirwatch.ReadFile(path, model.MaxMeshNetworksBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return &model.MeshNetworks{}, nil
	}
	if err != nil {
		return nil, err
	}
	nets, err := model.ParseMeshNetworks(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return nets, nil
}

// NetworksWatcherConfig configures a NetworksWatcher.
type NetworksWatcherConfig struct {
	// Path is the meshNetworks file (the istio ConfigMap's meshNetworks
	// key as mounted). Its directory is watched, so Kubernetes' swap of a
	// mounted ConfigMap's ..data link is seen.
	Path string
	// Initial is the meshNetworks istiod started with (ReadNetworksFile's);
	// nil means none.
	Initial *model.MeshNetworks
	// Resync is how often the file is read again besides change
	// notifications; zero means DefaultResync.
	Resync time.Duration
	// Metrics, when set, counts the reloads (config="meshNetworks").
	Metrics *ReloadMetrics
	Logger  *slog.Logger
}

// NetworksWatcher holds the meshNetworks in force and announces changes,
// as Istio's istiod reloads its --networksConfig file. A file that cannot
// be used (unparseable, over a limit, invalid) is refused: the last good
// meshNetworks keeps serving, the refusal is logged once while the file
// stays as it is, and counted. The values it hands out are shared and
// must not be modified.
type NetworksWatcher struct {
	fileValue[*model.MeshNetworks]
	cfg  NetworksWatcherConfig
	last string // the last refusal logged, so a resync does not repeat it
}

// networksConfig names meshNetworks in the reload metrics.
const networksConfig = "meshNetworks"

// NewNetworksWatcher returns a watcher of cfg.Path. It does no I/O: until
// Run reads the file, Current is cfg.Initial.
func NewNetworksWatcher(cfg NetworksWatcherConfig) (*NetworksWatcher, error) {
	initial := cfg.Initial
	if initial == nil {
		initial = &model.MeshNetworks{}
	}
	w := &NetworksWatcher{cfg: cfg}
	if err := w.init(cfg.Path, cfg.Resync, cfg.Logger, initial); err != nil {
		return nil, err
	}
	cfg.Metrics.rejected(networksConfig, false)
	return w, nil
}

// Run reads the file now, on every change and every Resync, until ctx is
// done.
func (w *NetworksWatcher) Run(ctx context.Context) error {
	w.watch(ctx, w.reload)
	return nil
}

// reload reads the file and, when it holds valid meshNetworks other than
// those in force, makes them current. Only Run's goroutine calls it.
func (w *NetworksWatcher) reload() {
	nets, err := ReadNetworksFile(w.path)
	if err != nil {
		w.cfg.Metrics.rejected(networksConfig, true)
		if msg := err.Error(); msg != w.last {
			w.last = msg
			w.cfg.Metrics.count(networksConfig, resultRejected)
			w.log.Error("meshNetworks rejected; the last good one keeps serving", "file", w.path, "err", err)
		}
		return
	}
	w.cfg.Metrics.rejected(networksConfig, false)
	if nets.Equal(w.Current()) {
		if w.last != "" {
			w.last = ""
			w.log.Info("meshNetworks file is valid again; the networks in force are unchanged", "file", w.path)
		}
		return
	}
	w.last = ""
	w.cfg.Metrics.count(networksConfig, resultApplied)
	// Logged before subscribers see them, so a log line never comes after
	// what it explains.
	w.log.Info("meshNetworks loaded", "file", w.path, "networks", nets.Names())
	w.current.Store(nets)
}
