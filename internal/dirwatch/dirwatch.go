// Package dirwatch calls back when the files of a directory change: after a
// burst of events settles, and periodically in case events were missed. It
// watches the directory, not its files, so Kubernetes' swap of a mounted
// volume's ..data symlink is seen, and the parent too, so the directory may
// appear, vanish and come back.
package dirwatch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long the directory must stay quiet before a
// reload. One write's events arrive back to back: os.WriteFile's CREATE
// and WRITEs, a write-then-rename's CREATE, WRITE and RENAME, or
// Kubernetes' ConfigMap update (a new ..<timestamp> directory, a ..data_tmp
// symlink renamed over ..data, the old directory removed), each a handful
// of system calls by one process with microseconds between them. 10 ms
// covers that burst even when the writer is descheduled once on a busy
// node. A longer quiet buys nothing for readers that debounce again (the
// xDS push waits for 100 ms of quiet, so a snapshot superseded within that
// time is never pushed); a reload in the middle of a slower, non-atomic
// write is at worst a parse error that keeps the last good model until the
// write's own events cause the next reload.
const DefaultDebounce = 10 * time.Millisecond

// Run calls reload once, then after each settled burst of changes in dir
// (debounce) and every resync, until ctx is done.
func Run(ctx context.Context, dir string, debounce, resync time.Duration, log *slog.Logger, reload func()) {
	dir = filepath.Clean(dir)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Error("cannot watch directory; re-reading it periodically only", "dir", dir, "interval", resync, "err", err)
	} else {
		defer w.Close()
	}
	dw := &dirWatch{w: w, dir: dir}
	dw.ensure()
	reload() // catch changes made before the watch started

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	tick := time.NewTicker(resync)
	defer tick.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-dw.events():
			if !ok {
				dw.w = nil // closed: rely on resync
				continue
			}
			if dw.relevant(ev) {
				dw.ensure()
				timer.Reset(debounce)
			}
		case err, ok := <-dw.errors():
			if !ok {
				dw.w = nil
				continue
			}
			log.Warn("watching directory", "dir", dir, "err", err)
		case <-timer.C:
			reload()
		case <-tick.C:
			dw.ensure()
			reload()
		}
	}
}

// dirWatch keeps fsnotify watches on a directory and its parent.
type dirWatch struct {
	w   *fsnotify.Watcher // nil when watching is unavailable
	dir string
}

func (d *dirWatch) events() <-chan fsnotify.Event {
	if d.w == nil {
		return nil
	}
	return d.w.Events
}

func (d *dirWatch) errors() <-chan error {
	if d.w == nil {
		return nil
	}
	return d.w.Errors
}

// ensure (re)adds the watches; adding an existing watch is harmless.
// Failures are retried on the next event or resync.
func (d *dirWatch) ensure() {
	if d.w == nil {
		return
	}
	_ = d.w.Add(filepath.Dir(d.dir))
	if st, err := os.Stat(d.dir); err == nil && st.IsDir() {
		_ = d.w.Add(d.dir)
	}
}

// relevant reports whether ev may change the directory's files: anything
// inside it, or the directory itself appearing or going.
func (d *dirWatch) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	return name == d.dir || filepath.Dir(name) == d.dir
}
