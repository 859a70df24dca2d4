package unsupported

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// maxHeap is what the reporter may keep for 10,000 objects.
const maxHeap = 30 << 20

// TestMemoryOf10000Objects: the live heap the reporter adds for 10,000
// objects it reports (5,000 EnvoyFilters of 1 KiB, watched by their
// metadata, and 5,000 DestinationRules with a load balancer, read whole
// and reduced to their record) stays under 30 MiB.
func TestMemoryOf10000Objects(t *testing.T) {
	c := startCluster(t)
	ns := c.env.Namespace(t)
	ef, dr := kind(t, networking, "EnvoyFilter"), kind(t, networking, "DestinationRule")
	const n = 10000
	patch := map[string]any{"applyTo": "HTTP_FILTER", "patch": map[string]any{"operation": "INSERT_BEFORE", "value": strings.Repeat("x", 1000)}}
	createAll(t, n, func(i int) error {
		if i%2 == 0 {
			return c.tryCreate(ef, ns, fmt.Sprintf("ef-%d", i), map[string]any{"configPatches": []any{patch}})
		}
		return c.tryCreate(dr, ns, fmt.Sprintf("dr-%d", i), map[string]any{
			"host":          fmt.Sprintf("svc-%d", i),
			"trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": "LEAST_REQUEST"}, "tls": map[string]any{"mode": "ISTIO_MUTUAL"}},
		})
	})

	before := liveHeap()
	r, _ := c.reporter(t, []policy.Kind{ef, dr})
	after := liveHeap()
	if got := len(inNamespace(r.Report(), ns)); got != n {
		t.Fatalf("%d objects reported, want %d", got, n)
	}
	t.Logf("live heap of the reporter with %d objects: %.1f MiB (%d bytes per object)", n, float64(after-before)/(1<<20), (after-before)/n)
	if after-before > maxHeap {
		t.Errorf("live heap grew by %.1f MiB, want at most %d MiB", float64(after-before)/(1<<20), maxHeap>>20)
	}
	runtime.KeepAlive(r)
}

// createAll runs create for 0..n-1 on 16 goroutines, failing on the first
// error.
func createAll(t *testing.T, n int, create func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var first sync.Once
	var err error
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if e := create(i); e != nil {
					first.Do(func() { err = e })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
