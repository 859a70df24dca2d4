package sds

import (
	"testing"
	"time"
)

func TestRepeatsLogsARefusalOncePerWindow(t *testing.T) {
	now := time.Unix(0, 0)
	r := newRepeats(time.Minute, 2, func() time.Time { return now })
	a := repeatKey{"", "gw", "ingress", "kubernetes://other/cert", "cross_namespace"}
	b := repeatKey{"", "gw", "ingress", "kubernetes://cert", "unauthorized"}
	if !r.first(a) || r.first(a) {
		t.Fatal("a key is first once")
	}
	now = now.Add(time.Minute)
	if !r.first(a) {
		t.Fatal("a key is first again after the window")
	}
	if !r.first(b) {
		t.Fatal("another key is first")
	}
	// Full: the oldest entries go rather than memory growing.
	c := repeatKey{"", "gw", "ingress", "kubernetes://x", "unauthorized"}
	if !r.first(c) || len(r.seen) > 2 {
		t.Fatalf("%d entries kept, limit 2", len(r.seen))
	}
}
