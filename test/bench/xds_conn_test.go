package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// retries counts why simulated proxies had to retry, by kind: "stream
// ResourceExhausted" is istiod shedding load as designed; every other kind
// ("stream <code>", "dial <cause>", "tls <cause>") is a failure.
type retries struct {
	mu     sync.Mutex
	counts map[string]int
	sample map[string]string

	dials       atomic.Int64 // TCP connections attempted
	slowestDial atomic.Int64 // nanoseconds, connect and TLS handshake
}

const expectedRetry = "stream ResourceExhausted"

func (r *retries) add(kind string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts, r.sample = map[string]int{}, map[string]string{}
	}
	r.counts[kind]++
	r.sample[kind] = err.Error()
}

func (r *retries) stream(err error) {
	r.add("stream "+status.Code(err).String(), err)
}

func (r *retries) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[kind]
}

// failures is the number of retries of every kind but expectedRetry.
func (r *retries) failures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, c := range r.counts {
		if k != expectedRetry {
			n += c
		}
	}
	return n
}

func (r *retries) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts, r.sample = nil, nil
	r.dials.Store(0)
	r.slowestDial.Store(0)
}

func (r *retries) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d dials, slowest connect+handshake %s", r.dials.Load(), time.Duration(r.slowestDial.Load()).Round(time.Millisecond))
	for _, k := range slices.Sorted(maps.Keys(r.counts)) {
		fmt.Fprintf(&b, "; %s: %d", k, r.counts[k])
		if k != expectedRetry {
			fmt.Fprintf(&b, " (%q)", r.sample[k])
		}
	}
	return b.String()
}

func (r *retries) observeDial(start time.Time) {
	d := int64(time.Since(start))
	for {
		cur := r.slowestDial.Load()
		if d <= cur || r.slowestDial.CompareAndSwap(cur, d) {
			return
		}
	}
}

// cause names what ended a connection attempt.
func cause(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return "other"
}

// dial is the fleet's TCP dialer; it counts attempts and failures. Errors
// while the fleet stops are not counted.
func (f *fleet) dial(ctx context.Context, addr string) (net.Conn, error) {
	f.retries.dials.Add(1)
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil && !f.stopping.Load() {
		f.retries.add("dial "+cause(err), err)
	}
	return c, err
}

// countingCreds counts TLS handshake failures and records the slowest
// connection setup.
type countingCreds struct {
	credentials.TransportCredentials
	f *fleet
}

func (c countingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	start := time.Now()
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil && !c.f.stopping.Load() {
		c.f.retries.add("tls "+cause(err), err)
	}
	if err == nil {
		c.f.retries.observeDial(start)
	}
	return conn, info, err
}

func (c countingCreds) Clone() credentials.TransportCredentials {
	return countingCreds{c.TransportCredentials.Clone(), c.f}
}

// isExhausted reports whether err is istiod shedding a new stream.
func isExhausted(err error) bool { return status.Code(err) == codes.ResourceExhausted }

// listenDrops is the host's count of connections the kernel dropped because
// a listen queue was full (TcpExt ListenOverflows and ListenDrops). It
// counts every listener in the network namespace.
func listenDrops(b *testing.B) (overflows, drops int64) {
	b.Helper()
	raw, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		b.Logf("no /proc/net/netstat: %v", err)
		return 0, 0
	}
	lines := strings.Split(string(raw), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		for j, n := range names {
			v, _ := strconv.ParseInt(values[j], 10, 64)
			switch n {
			case "ListenOverflows":
				overflows = v
			case "ListenDrops":
				drops = v
			}
		}
	}
	return overflows, drops
}
