// Package loadgen drives a fixed number of calls through concurrent
// workers and records each call's latency, for benchmarks of servers.
package loadgen

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Run makes n calls spread over workers goroutines, each call as soon as its
// worker's previous call returned, and returns the latency of every call,
// sorted. call gets the worker's index and the call's number. The first
// error stops every worker and is returned.
func Run(workers, n int, call func(worker, j int) error) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var once sync.Once
	var firstErr error
	var failed atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !failed.Load() {
				j := int(next.Add(1)) - 1
				if j >= n {
					return
				}
				start := time.Now()
				if err := call(w, j); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
				lat[j] = time.Since(start)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	slices.Sort(lat)
	return lat, nil
}

// Quantile returns the q-quantile (0 <= q < 1) of sorted latencies, or 0
// when there are none.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted))*q)]
}
