// Package logtest gives tests a slog handler that writes every record to
// the test's log and keeps it, so that a test can ask what was logged.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Recorder is a slog.Handler recording every record as one line:
// "<LEVEL> <message> key=value ...". It is safe for concurrent use.
type Recorder struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
}

var _ slog.Handler = (*Recorder)(nil)

// New returns a recorder writing to t, and a logger on it.
func New(t testing.TB) (*Recorder, *slog.Logger) {
	r := &Recorder{t: t}
	return r, slog.New(r)
}

func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.t.Log(b.String())
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	return nil
}

// WithAttrs and WithGroup drop what they are given: records keep only
// their own attributes.
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *Recorder) WithGroup(string) slog.Handler      { return r }

// Count counts the lines holding every one of parts.
func (r *Recorder) Count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, line := range r.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// Buffer collects output written concurrently (a process's stdout and
// stderr, a text log handler) while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
