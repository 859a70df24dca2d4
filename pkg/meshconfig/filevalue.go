package meshconfig

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/bulwark-mesh/bulwark/internal/dirwatch"
	"github.com/bulwark-mesh/bulwark/internal/latest"
)

// fileValue is what a watcher of one file shares: the file, how often it
// is read again, the value in force and its subscribers. The watcher
// embedding it decides what a read of the file makes current.
type fileValue[T any] struct {
	path    string
	resync  time.Duration
	log     *slog.Logger
	current latest.Value[T]
}

// init sets the file and the value in force until the file is read; a
// zero resync is DefaultResync, a nil logger discards.
func (f *fileValue[T]) init(path string, resync time.Duration, log *slog.Logger, initial T) error {
	if path == "" {
		return errors.New("meshconfig: no file to watch")
	}
	if resync <= 0 {
		resync = DefaultResync
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f.path, f.resync, f.log = path, resync, log
	f.current.Store(initial)
	return nil
}

// Current returns the value in force.
func (f *fileValue[T]) Current() T {
	v, _ := f.current.Load()
	return v
}

// Subscribe returns a channel receiving each new value (the latest only,
// when the reader is slow). cancel stops delivery and closes it.
func (f *fileValue[T]) Subscribe() (updates <-chan T, cancel func()) {
	return f.current.Subscribe(false)
}

// watch calls reload now, on every change in the file's directory (so
// Kubernetes' swap of a mounted ConfigMap's ..data link is seen) and every
// resync, until ctx is done.
func (f *fileValue[T]) watch(ctx context.Context, reload func()) {
	dirwatch.Run(ctx, filepath.Dir(f.path), dirwatch.DefaultDebounce, f.resync, f.log, reload)
}
