package meshconfig

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// TestNetworksWatcherFollowsKubeletsSymlinkSwapAndKeepsTheLastGood: the
// meshNetworks file mounted from a ConfigMap (its key's file, here named
// as configMapDir names it) is swapped as kubelet swaps it: a good
// version applies, a bad one is refused, logged once and counted once
// however often it is read again, the good one keeps serving; a good
// version again applies.
func TestNetworksWatcherFollowsKubeletsSymlinkSwapAndKeepsTheLastGood(t *testing.T) {
	d := newConfigMapDir(t, "networks: {net-b: {gateways: [{address: 192.0.2.1, port: 15443}]}}\n")
	reg := prometheus.NewRegistry()
	metrics, err := NewReloadMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	rec, log := logtest.New(t)
	initial, err := ReadNetworksFile(d.path())
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewNetworksWatcher(NetworksWatcherConfig{Path: d.path(), Initial: initial, Resync: time.Hour, Metrics: metrics, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	updates, cancel := w.Subscribe()
	defer cancel()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	nextNets := func() *model.MeshNetworks {
		t.Helper()
		select {
		case n := <-updates:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no meshNetworks update")
			return nil
		}
	}
	gateway := func(n *model.MeshNetworks) string {
		if len(n.Networks) != 1 || len(n.Networks[0].Gateways) != 1 {
			return ""
		}
		return n.Networks[0].Gateways[0].Address
	}

	d.update("networks: {net-b: {gateways: [{address: 192.0.2.9, port: 15443}]}}\n")
	if got := gateway(nextNets()); got != "192.0.2.9" {
		t.Fatalf("after the swap: gateway %q, want 192.0.2.9", got)
	}
	d.update("networks: {net-b: {gateways: [{address: 192.0.2.7, port: 70000}]}}\n")
	deadline := time.Now().Add(10 * time.Second)
	for rec.Count("meshNetworks rejected", "port 70000") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the bad file was not logged")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.reload() // a resync of the same bad file: not logged or counted again
	if n := rec.Count("meshNetworks rejected"); n != 1 {
		t.Errorf("refusal logged %d times, want once", n)
	}
	if got := testutil.ToFloat64(metrics.reloads.WithLabelValues("meshNetworks", "rejected")); got != 1 {
		t.Errorf("rejections counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.refused.WithLabelValues("meshNetworks")); got != 1 {
		t.Errorf("bulwark_config_rejected %v while refused, want 1", got)
	}
	if got := gateway(w.Current()); got != "192.0.2.9" {
		t.Fatalf("a refused file replaced the networks in force: gateway %q", got)
	}
	select {
	case n := <-updates:
		t.Fatalf("a refused file was announced: %+v", n)
	default:
	}

	d.update("networks: {net-b: {gateways: [{address: 192.0.2.3, port: 15443}]}}\n")
	if got := gateway(nextNets()); got != "192.0.2.3" {
		t.Fatalf("after a good file again: gateway %q", got)
	}
	if got := testutil.ToFloat64(metrics.refused.WithLabelValues("meshNetworks")); got != 0 {
		t.Errorf("bulwark_config_rejected %v after a good file, want 0", got)
	}
	if got := testutil.ToFloat64(metrics.reloads.WithLabelValues("meshNetworks", "applied")); got != 2 {
		t.Errorf("applied reloads %v, want 2", got)
	}
}

// TestMeshConfigRefusalIsCounted: the mesh configuration's reloads are
// counted in the same family.
func TestMeshConfigRefusalIsCounted(t *testing.T) {
	d := newConfigMapDir(t, "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
	metrics, err := NewReloadMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, log := logtest.New(t)
	w, err := NewWatcher(WatcherConfig{Path: d.path(), Defaults: testDefaults, Metrics: metrics, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	w.reload()
	d.update("outboundTrafficPolicy: [oops\n")
	w.reload()
	w.reload()
	if got := testutil.ToFloat64(metrics.reloads.WithLabelValues("mesh", "rejected")); got != 1 {
		t.Errorf("rejections counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.reloads.WithLabelValues("mesh", "applied")); got != 1 {
		t.Errorf("applied reloads %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.refused.WithLabelValues("mesh")); got != 1 {
		t.Errorf("bulwark_config_rejected %v, want 1", got)
	}
}
