package bench

// The xDS benchmarks load a real istiod with thousands of simulated
// proxyless gRPC proxies (fleet, in xds_fleet_test.go). Each benchmark is
// one whole measurement: run them with -benchtime 1x; b.N is not used as an
// iteration count. Every wait is bounded and fails the benchmark when it
// runs out.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	connectTimeout = 3 * time.Minute
	convergeLimit  = time.Minute
	stormLimit     = time.Minute
	quiescence     = 2 * time.Second
)

// xdsServer is istiod on local files with the echo model in --configDir.
type xdsServer struct {
	*server
	modelDir string
}

func startXDS(b *testing.B, proxies int) *xdsServer {
	b.Helper()
	return startXDSWith(b, proxies, echoModel("10.1.0.1"))
}

// startXDSWith is istiod with model in --configDir.
func startXDSWith(b *testing.B, proxies int, model string) *xdsServer {
	b.Helper()
	raiseFileLimit(b, uint64(proxies)+1024)
	bin := istiodBinary(b)
	s := &xdsServer{modelDir: filepath.Join(b.TempDir(), "model")}
	if err := os.MkdirAll(s.modelDir, 0o700); err != nil {
		b.Fatal(err)
	}
	writeModelText(b, s.modelDir, model)
	s.server = start(b, bin, "--configDir", s.modelDir)
	s.mint(b, bin)
	return s
}

// BenchmarkXDSConvergence measures, after an endpoint change, each proxy's
// time until it has received and ACKed the new EDS. The time includes the
// model directory's watch debounce (10 ms) and the server's push debounce
// (100 ms of quiet), as a real change would.
func BenchmarkXDSConvergence(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			srv := startXDS(b, n)
			ctx, cancel := context.WithTimeout(context.Background(), connectTimeout+convergeLimit+time.Minute)
			defer cancel()
			f := newFleet(b, srv.server, n)
			f.start(b, ctx, n)
			connect := f.waitReady(b, n, connectTimeout)
			f.converge(b, srv, connect, func() { writeModel(b, srv.modelDir, "10.1.0.2") })
			b.Logf("connect: %s", f.progress())
		})
	}
}

// converge measures the fleet's convergence after change, once every
// proxy holds the same endpoints: each proxy's time until it has ACKed
// endpoints of another version, and the server's CPU meanwhile.
func (f *fleet) converge(b *testing.B, srv *xdsServer, connect time.Duration, change func()) {
	b.Helper()
	time.Sleep(quiescence)
	base := f.proxies[0].lastEDS.Load()
	for _, p := range f.proxies {
		if v := p.lastEDS.Load(); v == nil || *v != *base {
			b.Fatalf("proxies disagree on the endpoints' version before the change")
		}
	}
	f.baseline.Store(base)
	cpu0 := srv.cpuTime(b)
	n := len(f.proxies)
	b.ResetTimer()
	f.changedAt.Store(time.Now().UnixNano())
	change()
	waitFor(b, "converge", convergeLimit, func() bool { return f.converged.Load() >= int64(n) }, f.progress)
	b.StopTimer()
	lat := slices.Clone(f.lat)
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(ms(srv.cpuTime(b)-cpu0), "server-cpu-ms")
	b.ReportMetric(connect.Seconds(), "connect-s")
	b.ReportMetric(float64(f.retries.failures()), "failed-retries")
	b.ReportMetric(float64(f.retries.dials.Load()-int64(n)), "redials")
}

// BenchmarkXDSMemoryPerProxy compares istiod's memory with no proxy and
// with 5,000 connected and ACKed. Without a way to force a GC from
// outside, each figure is the minimum of samples taken after quiescence.
func BenchmarkXDSMemoryPerProxy(b *testing.B) {
	const n = 5000
	srv := startXDS(b, n)
	time.Sleep(quiescence)
	rss0, heap0 := srv.memory(b)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout+time.Minute)
	defer cancel()
	f := newFleet(b, srv.server, n)
	f.start(b, ctx, n)
	f.waitReady(b, n, connectTimeout)
	time.Sleep(quiescence)
	rss1, heap1 := srv.memory(b)
	b.ReportMetric(float64(rss1-rss0)/1024/n, "rss-KiB/proxy")
	b.ReportMetric(float64(heap1-heap0)/1024/n, "heap-inuse-KiB/proxy")
	b.ReportMetric(float64(rss0)/(1<<20), "rss0-MiB")
	b.ReportMetric(float64(rss1)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(f.retries.failures()), "failed-retries")
	b.ReportMetric(float64(f.retries.dials.Load()-n), "redials")
	b.Logf("connect: %s", f.progress())
}

// BenchmarkXDSReconnectStorm closes 5,000 connected proxies' connections at
// once and reconnects them all together. Streams over istiod's token bucket
// get ResourceExhausted and retry with jittered exponential backoff; that is
// the only retry allowed. Every proxy must be served within a minute, on
// the one connection it dialled.
func BenchmarkXDSReconnectStorm(b *testing.B) {
	const n = 5000
	srv := startXDS(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout+stormLimit+time.Minute)
	defer cancel()
	f := newFleet(b, srv.server, n)
	f.start(b, ctx, n)
	connect := f.waitReady(b, n, connectTimeout)
	b.Logf("first connect: %s in %s", f.progress(), connect.Round(time.Millisecond))
	f.stop()
	f.ready.Store(0)
	f.retries.reset()
	overflows0, drops0 := listenDrops(b)
	cpu0 := srv.cpuTime(b)
	b.ResetTimer()
	start := time.Now()
	f.start(b, ctx, n)
	f.waitReady(b, n, stormLimit)
	b.StopTimer()
	overflows, drops := listenDrops(b)
	b.ReportMetric(time.Since(start).Seconds(), "all-served-s")
	b.ReportMetric(float64(f.retries.count(expectedRetry)), "resource-exhausted")
	b.ReportMetric(float64(f.retries.failures()), "failed-retries")
	b.ReportMetric(float64(f.retries.dials.Load()-n), "redials")
	b.ReportMetric(float64(overflows-overflows0), "listen-overflows")
	b.ReportMetric(float64(drops-drops0), "listen-drops")
	b.ReportMetric(float64(time.Duration(f.retries.slowestDial.Load()).Milliseconds()), "slowest-connect-ms")
	b.ReportMetric((srv.cpuTime(b) - cpu0).Seconds(), "server-cpu-s")
	b.Logf("storm: all served after %s; %s", time.Since(start).Round(time.Millisecond), f.progress())
	if fails := f.retries.failures(); fails != 0 {
		b.Errorf("%d retries other than ResourceExhausted: %s", fails, &f.retries)
	}
	if d := f.retries.dials.Load(); d != n {
		b.Errorf("%d connections dialled for %d proxies", d, n)
	}
}

// memory is istiod's lowest VmRSS and go_memstats_heap_inuse_bytes over a
// few samples, in bytes.
func (s *xdsServer) memory(b *testing.B) (rss, heap int64) {
	b.Helper()
	rss, heap = -1, -1
	for range 5 {
		r, h := s.rss(b), s.metric(b, "go_memstats_heap_inuse_bytes")
		if rss < 0 || r < rss {
			rss = r
		}
		if heap < 0 || h < heap {
			heap = h
		}
		time.Sleep(500 * time.Millisecond)
	}
	return rss, heap
}

// forcedGCPeriod bounds the wait for a garbage collection: the Go runtime
// runs one at least every two minutes.
const forcedGCPeriod = 2*time.Minute + 30*time.Second

// afterGC waits for a garbage collection that starts after since, then
// returns istiod's heap found live by it and its RSS a few seconds later,
// once the runtime has returned freed memory to the system.
func (s *xdsServer) afterGC(b *testing.B, since time.Time) (rss, live int64) {
	b.Helper()
	waitFor(b, "a garbage collection", forcedGCPeriod, func() bool {
		return s.metric(b, "go_memstats_last_gc_time_seconds") > since.Unix()
	}, func() string { return "no GC since " + since.Format(time.TimeOnly) })
	time.Sleep(5 * time.Second)
	return s.rss(b), s.metric(b, "go_gc_heap_live_bytes")
}

func (s *xdsServer) rss(b *testing.B) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}

// metric is the value of an unlabelled metric on istiod's /metrics.
func (s *xdsServer) metric(b *testing.B, name string) int64 {
	b.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + s.monitoring + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return int64(f)
		}
	}
	b.Fatalf("no %s in /metrics", name)
	return 0
}
