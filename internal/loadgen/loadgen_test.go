package loadgen

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	errBoom := errors.New("boom")
	tests := map[string]struct {
		workers, n int
		failAt     int // -1: never
		wantErr    error
	}{
		"every call is made once with more calls than workers": {workers: 3, n: 10, failAt: -1},
		"every call is made once with more workers than calls": {workers: 8, n: 2, failAt: -1},
		"no calls return no latencies":                         {workers: 2, n: 0, failAt: -1},
		"a failing call stops the run with its error":          {workers: 2, n: 50, failAt: 3, wantErr: errBoom},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			seen := make([]atomic.Int32, tc.n)
			lat, err := Run(tc.workers, tc.n, func(_, j int) error {
				seen[j].Add(1)
				if j == tc.failAt {
					return errBoom
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run() error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if len(lat) != tc.n {
				t.Errorf("got %d latencies, want %d", len(lat), tc.n)
			}
			for j := range seen {
				if c := seen[j].Load(); c != 1 {
					t.Errorf("call %d made %d times, want once", j, c)
				}
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	sorted := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := map[string]struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		"the median of ten is the sixth":         {in: sorted, q: 0.5, want: 6},
		"the 99th percentile of ten is the last": {in: sorted, q: 0.99, want: 10},
		"no latencies give zero":                 {q: 0.5},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Quantile(tc.in, tc.q); got != tc.want {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}
