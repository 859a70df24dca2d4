package scope

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// TestDestinationsOfManyHosts: a VirtualService routing to more hosts
// than destinations looks through without an index lists each host once,
// in the order of its first route, with each port it names once, past
// that count as before it.
func TestDestinationsOfManyHosts(t *testing.T) {
	const hosts = destinationsScanned + 8
	var b strings.Builder
	b.WriteString("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: many, namespace: app}\nspec:\n  hosts: [many.app.svc.cluster.local]\n  http:\n")
	// Each host twice on port 80, then every third host again on port 81
	// (and once more on 80), so that hosts repeat before and after the
	// index is made.
	for round := range 2 {
		for i := range hosts {
			fmt.Fprintf(&b, "  - {name: r%d-%d, match: [{headers: {x: {exact: \"%d-%d\"}}}], route: [{destination: {host: h%d.app.svc.cluster.local, port: {number: 80}}}]}\n", round, i, round, i, i)
		}
	}
	for i := 0; i < hosts; i += 3 {
		fmt.Fprintf(&b, "  - {name: s%d, match: [{headers: {y: {exact: \"%d\"}}}], route: [{destination: {host: h%d.app.svc.cluster.local, port: {number: 81}}}, {destination: {host: h%d.app.svc.cluster.local, port: {number: 80}}}]}\n", i, i, i, i)
	}
	snap := modeltest.Load(t, b.String())
	vss := snap.Resources().VirtualServices
	if len(vss) != 1 {
		t.Fatalf("%d VirtualServices, want 1", len(vss))
	}
	got := destinations(snap, vss[0], "app")
	if len(got) != hosts {
		t.Fatalf("%d destinations, want %d: %+v", len(got), hosts, got)
	}
	for i, d := range got {
		if want := fmt.Sprintf("h%d.app.svc.cluster.local", i); d.host != want {
			t.Errorf("destination %d is %s, want %s", i, d.host, want)
		}
		want := []uint32{80}
		if i%3 == 0 {
			want = []uint32{80, 81}
		}
		if !slices.Equal(d.ports, want) {
			t.Errorf("destination %s has ports %v, want %v", d.host, d.ports, want)
		}
	}
}
