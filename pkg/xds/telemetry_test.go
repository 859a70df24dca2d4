package xds

import (
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// TestMeshAccessLogReachesASidecar: a connected sidecar's listeners carry
// istio.stats under the default mesh config, gain the access log when
// accessLogFile is set, and lose istio.stats when defaultProviders.metrics
// is emptied, without reconnecting.
func TestMeshAccessLogReachesASidecar(t *testing.T) {
	watcher, write := meshFile(t, "outboundTrafficPolicy: {mode: ALLOW_ANY}\n")
	h := newHarness(t, modeltest.Load(t, envoyManifests), func(c *Config) { c.Mesh = watcher })
	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "client", "10.0.0.9"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	ack(t, st, recv(t, st))
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	lds := recv(t, st)
	ack(t, st, lds)
	if logs, stats := virtualOutboundTelemetry(t, lds); logs != 0 || !stats {
		t.Fatalf("default mesh config: %d listener access logs, istio.stats %v; want none and istio.stats", logs, stats)
	}

	write("accessLogFile: /dev/stdout\naccessLogEncoding: JSON\ndefaultProviders: {metrics: []}\n")
	for {
		r := recv(t, st)
		ack(t, st, r)
		if r.GetTypeUrl() != resource.ListenerType {
			continue
		}
		if logs, stats := virtualOutboundTelemetry(t, r); logs != 1 || stats {
			t.Fatalf("access log on, metrics off: %d listener access logs, istio.stats %v; want 1 and none", logs, stats)
		}
		return
	}
}

// virtualOutboundTelemetry is the number of virtualOutbound's access logs
// and whether its catch-all chain has istio.stats.
func virtualOutboundTelemetry(t *testing.T, r *discovery.DiscoveryResponse) (int, bool) {
	t.Helper()
	for _, a := range r.GetResources() {
		l := unmarshal[*listener.Listener](t, a, &listener.Listener{})
		if l.GetName() != "virtualOutbound" {
			continue
		}
		stats := false
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				stats = stats || f.GetName() == "istio.stats"
			}
		}
		return len(l.GetAccessLog()), stats
	}
	t.Fatal("no virtualOutbound")
	return 0, false
}
