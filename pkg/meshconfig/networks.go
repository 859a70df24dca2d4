package meshconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
	"github.com/bulwark-mesh/bulwark/internal/latest"
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
	cfg     NetworksWatcherConfig
	log     *slog.Logger
	current latest.Value[*model.MeshNetworks]
	last    string // the last refusal logged, so a resync does not repeat it
}

// networksConfig names meshNetworks in the reload metrics.
const networksConfig = "meshNetworks"

// NewNetworksWatcher returns a watcher of cfg.Path. It does no I/O: until
// Run reads the file, Current is cfg.Initial.
func NewNetworksWatcher(cfg NetworksWatcherConfig) (*NetworksWatcher, error) {
	if cfg.Path == "" {
		return nil, errors.New("meshconfig: no meshNetworks file to watch")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	initial := cfg.Initial
	if initial == nil {
		initial = &model.MeshNetworks{}
	}
	w := &NetworksWatcher{cfg: cfg, log: cfg.Logger}
	w.current.Store(initial)
	cfg.Metrics.rejected(networksConfig, false)
	return w, nil
}

// Current returns the meshNetworks in force; never nil.
func (w *NetworksWatcher) Current() *model.MeshNetworks {
	n, _ := w.current.Load()
	return n
}

// Subscribe returns a channel receiving each new meshNetworks (the latest
// only, when the reader is slow). cancel stops delivery and closes it.
func (w *NetworksWatcher) Subscribe() (updates <-chan *model.MeshNetworks, cancel func()) {
	return w.current.Subscribe(false)
}

// Run reads the file now, on every change and every Resync, until ctx is
// done.
func (w *NetworksWatcher) Run(ctx context.Context) error {
	dirwatch.Run(ctx, filepath.Dir(w.cfg.Path), dirwatch.DefaultDebounce, w.cfg.Resync, w.log, w.reload)
	return nil
}

// reload reads the file and, when it holds valid meshNetworks other than
// those in force, makes them current. Only Run's goroutine calls it.
func (w *NetworksWatcher) reload() {
	nets, err := ReadNetworksFile(w.cfg.Path)
	if err != nil {
		w.cfg.Metrics.rejected(networksConfig, true)
		if msg := err.Error(); msg != w.last {
			w.last = msg
			w.cfg.Metrics.count(networksConfig, resultRejected)
			w.log.Error("meshNetworks rejected; the last good one keeps serving", "file", w.cfg.Path, "err", err)
		}
		return
	}
	w.cfg.Metrics.rejected(networksConfig, false)
	if nets.Equal(w.Current()) {
		if w.last != "" {
			w.last = ""
			w.log.Info("meshNetworks file is valid again; the networks in force are unchanged", "file", w.cfg.Path)
		}
		return
	}
	w.last = ""
	w.cfg.Metrics.count(networksConfig, resultApplied)
	// Logged before subscribers see them, so a log line never comes after
	// what it explains.
	w.log.Info("meshNetworks loaded", "file", w.cfg.Path, "networks", nets.Names())
	w.current.Store(nets)
}
