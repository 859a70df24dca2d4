package clusters

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/model"
)

func onNetwork(svc *model.Service, network string) *model.Service {
	for port, eps := range svc.Endpoints {
		for i := range eps {
			eps[i].Network = network
		}
		svc.Endpoints[port] = eps
	}
	return svc
}

func TestEndpointsOfSeveralNetworksAreCountedAndSaidToBeLeftOut(t *testing.T) {
	logs, log := logtest.New(t)
	reg := prometheus.NewRegistry()
	m, err := New(model.NewStore(), log, reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Local().Publish(snapshot("a1", onNetwork(service("echo", "a", map[string]uint32{"http": 80}, "10.0.0.1", "10.0.0.2"), "net1")))
	if n := logs.Count("endpoints of several networks"); n != 0 {
		t.Fatalf("one network warned about %d times", n)
	}
	b := m.Remote("b")
	b.Publish(snapshot("b1", onNetwork(service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1"), "net2")))
	b.Publish(snapshot("b2", onNetwork(service("echo", "b", map[string]uint32{"http": 80}, "10.1.0.1", "10.1.0.2"), "net2")))
	if n := logs.Count("endpoints of several networks", "net2"); n != 1 {
		t.Errorf("a second network warned about %d times, want once", n)
	}
	if n := logs.Count("endpoints of several networks", "proxyless gRPC clients get the endpoints of their own network"); n != 1 {
		t.Errorf("the warning says %d times that proxyless gRPC clients get their own network alone, want once", n)
	}
	for _, c := range []struct {
		cluster, network string
		want             float64
	}{{"a", "net1", 2}, {"b", "net2", 2}} {
		if got := testutil.ToFloat64(m.networks.gauge.WithLabelValues(c.cluster, c.network)); got != c.want {
			t.Errorf("bulwark_network_endpoints{%s,%s} = %v, want %v", c.cluster, c.network, got, c.want)
		}
	}
	m.Remove("b")
	if n := testutil.CollectAndCount(m.networks.gauge); n != 1 {
		t.Errorf("after b's removal the gauge has %d series, want a's alone", n)
	}
}
