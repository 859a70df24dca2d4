package xds

import (
	"fmt"
	"testing"
)

// TestNameSetUpdatesAreMadeOnce: a thousand streams holding one set of a
// thousand names that each subscribe to one more name (a cluster added,
// its load assignment asked for) get one new set, made by the first: the
// others neither copy nor key the thousand names again.
func TestNameSetUpdatesAreMadeOnce(t *testing.T) {
	var sets nameSets
	var names []string
	for i := range 1000 {
		names = append(names, fmt.Sprintf("outbound|80||svc-%d.ns.svc.cluster.local", i))
	}
	held := sets.update(nil, names, nil)
	added := []string{"outbound|80|v1|svc-7.ns.svc.cluster.local"}
	first := sets.update(held, added, nil)
	if !first.contains(added[0]) || len(first.names) != 1001 {
		t.Fatalf("the update holds %d names, %q: %v", len(first.names), added[0], first.contains(added[0]))
	}
	var got *nameSet
	allocs := testing.AllocsPerRun(999, func() { got = sets.update(held, added, nil) })
	if got != first {
		t.Fatal("the same update of the same set made another set")
	}
	t.Logf("%.0f allocations per update after the first", allocs)
	if allocs > 4 {
		t.Errorf("%.0f allocations per update after the first, want at most 4: the set was copied and keyed again", allocs)
	}
	// Unsubscribing it again is a step too, and gives the set held.
	if back := sets.update(first, nil, added); back != held {
		t.Fatal("unsubscribing the added name did not give the set held before")
	}
	// Another set with the same update is another step.
	other := sets.update(nil, names[:10], nil)
	if o := sets.update(other, added, nil); len(o.names) != 11 || !o.contains(added[0]) {
		t.Fatalf("another set's update: %v", o.names)
	}
}
