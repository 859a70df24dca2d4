package xds

import (
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// TestTypesNotServedAreLoggedAndCounted: a proxy asking for the DNS
// proxy's name table (NDS), or for a type nobody serves, is sent nothing
// for it, on either protocol, and the stream goes on; each request is
// counted by a type label from a fixed set, and each label logged once in
// a while, never the whole of a long type URL.
func TestTypesNotServedAreLoggedAndCounted(t *testing.T) {
	const nds = "type.googleapis.com/istio.networking.nds.v1.NameTable"
	rec, log := logtest.New(t)
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) { c.Logger = log })
	made := "type.googleapis.com/made.up." + strings.Repeat("x", 4096)

	st := h.stream(clientID)
	for _, typeURL := range []string{nds, made, nds} {
		if err := st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: typeURL}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, st); r.GetTypeUrl() != grpcgen.ListenerType {
		t.Fatalf("after the types not served, the stream got %s, want its listener", r.GetTypeUrl())
	}

	dst := h.deltaStream(clientID)
	if err := dst.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: nds}); err != nil {
		t.Fatal(err)
	}
	if err := dst.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.ListenerType, ResourceNamesSubscribe: []string{echoListener}}); err != nil {
		t.Fatal(err)
	}
	if r := recvDelta(t, dst); r.GetTypeUrl() != grpcgen.ListenerType {
		t.Fatalf("after NDS, the incremental stream got %s, want its listener", r.GetTypeUrl())
	}

	counter := h.srv.unserved.counter
	if got := testutil.ToFloat64(counter.WithLabelValues("nds")); got != 3 {
		t.Errorf(`bulwark_xds_unserved_requests_total{type="nds"} = %v, want 3`, got)
	}
	if got := testutil.ToFloat64(counter.WithLabelValues("other")); got != 1 {
		t.Errorf(`bulwark_xds_unserved_requests_total{type="other"} = %v, want 1`, got)
	}
	if got := testutil.CollectAndCount(counter); got != 2 {
		t.Errorf("%d label sets, want nds and other", got)
	}
	if n := rec.Count("xDS type not served", "type=nds", "ISTIO_META_DNS_CAPTURE"); n != 1 {
		t.Errorf("NDS logged %d times, want once in five minutes", n)
	}
	if n := rec.Count("xDS type not served", "type=other"); n != 1 {
		t.Errorf("the made-up type logged %d times, want once", n)
	}
	if n := rec.Count(strings.Repeat("x", maxLoggedTypeURL)); n != 0 {
		t.Errorf("a log line repeats %d times the proxy's type URL past %d bytes", n, maxLoggedTypeURL)
	}
}
