package bootstrap

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/internal/kubewatch"
	"github.com/bulwark-mesh/bulwark/internal/logtest"
)

// gaugeValue reads one gauge from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestAPIServerMonitorSaysOncePerOutage(t *testing.T) {
	rec, log := logtest.New(t)
	reg := prometheus.NewRegistry()
	m := newMonitor(func(context.Context) error { return nil }, kubewatch.NewGate(), reg, log)
	const unreachable, back = "kubernetes API server unreachable", "kubernetes API server reachable again"

	if got := gaugeValue(t, reg, "bulwark_kube_apiserver_reachable"); got != 0 {
		t.Errorf("before any probe: reachable = %v, want 0", got)
	}
	m.observe(nil)
	if got := gaugeValue(t, reg, "bulwark_kube_apiserver_reachable"); got != 1 {
		t.Errorf("after a success: reachable = %v, want 1", got)
	}
	for range 2 { // two outages of many failed probes each
		for range 50 {
			m.observe(errors.New("connection refused"))
		}
		if down, _ := m.Unreachable(); !down {
			t.Fatal("Unreachable() = false during an outage")
		}
		if got := gaugeValue(t, reg, "bulwark_kube_apiserver_reachable"); got != 0 {
			t.Errorf("during an outage: reachable = %v, want 0", got)
		}
		m.observe(nil)
		m.observe(nil)
	}
	if n := rec.Count(unreachable); n != 2 {
		t.Errorf("%d %q lines for 2 outages of 50 failed probes, want 2", n, unreachable)
	}
	if n := rec.Count(back); n != 2 {
		t.Errorf("%d %q lines, want 2", n, back)
	}
	if got := testutil.ToFloat64(m.outages); got != 2 {
		t.Errorf("outages = %v, want 2", got)
	}
	if got := gaugeValue(t, reg, "bulwark_kube_apiserver_reachable"); got != 1 {
		t.Errorf("after the outages: reachable = %v, want 1", got)
	}
}

func TestAPIServerMonitorRunsUntilCancelled(t *testing.T) {
	_, log := logtest.New(t)
	var probes atomic.Int32
	m := newMonitor(func(context.Context) error {
		if probes.Add(1) > 2 {
			return errors.New("down")
		}
		return nil
	}, kubewatch.NewGate(), prometheus.NewRegistry(), log)
	m.interval = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if down, _ := m.Unreachable(); down {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a failing probe was not noticed")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestAPIServerMonitorOpensTheGateWhenTheServerIsBack: a request waiting
// at the gate has the monitor probe at once, not at its next tick an hour
// away, and again every fastInterval while the API server is away; the
// first probe that finds it back lets the request go.
func TestAPIServerMonitorOpensTheGateWhenTheServerIsBack(t *testing.T) {
	_, log := logtest.New(t)
	// The API server answers the first probe, then is away for two.
	script := []error{nil, errors.New("connection refused"), errors.New("connection refused"), nil}
	var probes atomic.Int32
	gate := kubewatch.NewGate()
	first := make(chan struct{})
	m := newMonitor(func(context.Context) error {
		n := int(probes.Add(1))
		if n == 1 {
			defer close(first)
		}
		return script[min(n, len(script))-1]
	}, gate, prometheus.NewRegistry(), log)
	m.interval, m.fastInterval = time.Hour, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	<-first // the gate runs, and the next tick is an hour away
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if !gate.Wait(wctx, time.Now()) {
		t.Fatal("the gate did not open when the API server came back")
	}
	if n := probes.Load(); n != 4 {
		t.Errorf("%d probes before the gate opened, want 4: one before the request waited, two finding the server away, one finding it back", n)
	}
	if down, _ := m.Unreachable(); down {
		t.Error("Unreachable() after a successful probe")
	}
}
