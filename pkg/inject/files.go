package inject

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
)

// maxConfigFileSize bounds each injector config file.
const maxConfigFileSize = 1 << 20

// FileSource keeps a Store in step with the files "config" and "values" of a
// directory: the istio-sidecar-injector ConfigMap as Kubernetes mounts it,
// or plain files in local mode. Until a valid pair appears the Store keeps
// the built-in defaults; a bad update is logged and the last good
// configuration keeps serving.
type FileSource struct {
	dir      string
	store    *Store
	log      *slog.Logger
	debounce time.Duration
	resync   time.Duration
	last     string // the last outcome logged, to log each change once
}

// NewFileSource returns a source for dir. It does no I/O.
func NewFileSource(dir string, store *Store, log *slog.Logger) *FileSource {
	return &FileSource{dir: dir, store: store, log: log, debounce: 100 * time.Millisecond, resync: 30 * time.Second}
}

// Run watches the directory until ctx is done.
func (f *FileSource) Run(ctx context.Context) error {
	dirwatch.Run(ctx, f.dir, f.debounce, f.resync, f.log, f.reload)
	return nil
}

func (f *FileSource) reload() {
	config, cerr := readConfigFile(filepath.Join(f.dir, "config"))
	values, verr := readConfigFile(filepath.Join(f.dir, "values"))
	switch {
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(verr, fs.ErrNotExist):
		f.once("absent", slog.LevelInfo, "no injector configuration files; the current configuration keeps serving (built-in defaults until one is loaded)", "dir", f.dir)
		return
	case cerr != nil && !errors.Is(cerr, fs.ErrNotExist):
		f.once("read:"+cerr.Error(), slog.LevelError, "injector configuration not loaded; the last good one keeps serving", "err", cerr)
		return
	case verr != nil && !errors.Is(verr, fs.ErrNotExist):
		f.once("read:"+verr.Error(), slog.LevelError, "injector configuration not loaded; the last good one keeps serving", "err", verr)
		return
	}
	if err := f.store.Update(config, values); err != nil {
		f.once("bad:"+err.Error(), slog.LevelError, "injector configuration rejected; the last good one keeps serving", "dir", f.dir, "err", err)
		return
	}
	f.once("loaded:"+string(config)+string(values), slog.LevelInfo, "injector configuration loaded", "dir", f.dir)
}

// once logs msg when the outcome differs from the last one logged, so the
// periodic resync does not repeat it.
func (f *FileSource) once(key string, level slog.Level, msg string, args ...any) {
	if key == f.last {
		return
	}
	f.last = key
	f.log.Log(context.Background(), level, msg, args...)
}

// readConfigFile reads at most maxConfigFileSize bytes of path.
func readConfigFile(path string) ([]byte, error) { return dirwatch.ReadFile(path, maxConfigFileSize) }
