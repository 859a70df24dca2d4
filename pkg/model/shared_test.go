package model

import (
	"sync"
	"sync/atomic"
	"testing"
)

type sharedTestKey struct{ name string }

func TestSharedValueIsBuiltOncePerSnapshotAndKey(t *testing.T) {
	snap := Build("v", Options{}, Resources{})
	var builds atomic.Int32
	build := func(v int) func() *int {
		return func() *int {
			builds.Add(1)
			return &v
		}
	}
	var wg sync.WaitGroup
	got := make([]*int, 16)
	for i := range got {
		wg.Go(func() { got[i] = SharedValue(snap, sharedTestKey{"a"}, build(i)) })
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("16 concurrent callers built the value %d times, want once", n)
	}
	for _, p := range got {
		if p != got[0] {
			t.Fatal("concurrent callers got different values of one key")
		}
	}
	if other := SharedValue(snap, sharedTestKey{"b"}, build(-1)); *other != -1 {
		t.Errorf("another key's value is %d, want its own (-1)", *other)
	}
	if again := SharedValue(Build("v", Options{}, Resources{}), sharedTestKey{"a"}, build(-2)); *again != -2 {
		t.Errorf("another snapshot's value is %d, want its own (-2)", *again)
	}
	if n := builds.Load(); n != 3 {
		t.Errorf("%d builds, want 3 (one per snapshot and key)", n)
	}
}

func TestSharedValuesAreNotCarriedToACopyWithOtherOptions(t *testing.T) {
	snap := Build("v", Options{}, Resources{})
	one := SharedValue(snap, sharedTestKey{"a"}, func() string { return "root" })
	if got := SharedValue(snap.WithRootNamespace("other-root"), sharedTestKey{"a"}, func() string { return "other" }); got != "other" {
		t.Errorf("a copy with another root namespace got %q, the original's value", got)
	}
	if got := SharedValue(snap.WithExportDefaults([]string{"."}, nil), sharedTestKey{"a"}, func() string { return "other" }); got != "other" {
		t.Errorf("a copy with other export defaults got %q, the original's value", got)
	}
	if got := SharedValue(snap, sharedTestKey{"a"}, func() string { return "again" }); got != one {
		t.Errorf("the original's value is now %q, want %q", got, one)
	}
}

func TestSharedValuesAreBounded(t *testing.T) {
	snap := Build("v", Options{}, Resources{})
	for i := range maxShared {
		SharedValue(snap, i, func() int { return i })
	}
	builds := 0
	for range 2 {
		SharedValue(snap, "past the bound", func() int { builds++; return 0 })
	}
	if builds != 2 {
		t.Errorf("past the bound a value was built %d times for two callers, want each caller's own", builds)
	}
	if n := len(snap.shared.m); n != maxShared {
		t.Errorf("the snapshot keeps %d values, want the bound %d", n, maxShared)
	}
	if got := SharedValue(&Snapshot{}, sharedTestKey{"a"}, func() int { return 7 }); got != 7 {
		t.Errorf("a snapshot not assembled gives %d, want the value built", got)
	}
}
