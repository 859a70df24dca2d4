package interop

import (
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// checkStandinTelemetry checks that Istio's standard telemetry reached
// the stand-in through pilot-agent (and was ACKed, which
// checkStandinXDS checks): every chain of virtualInbound begins with
// the TCP metadata exchange and counts with istio.stats (before tcp_proxy,
// or, on HTTP chains, before the router after the peer metadata filter),
// and every outbound cluster runs the metadata exchange.
func checkStandinTelemetry(t *testing.T, st *standinState) {
	t.Helper()
	cfg := decodeStandin(t, st)
	i := slices.IndexFunc(cfg.listeners, func(l *listenerv3.Listener) bool { return l.GetName() == "virtualInbound" })
	if i < 0 {
		t.Fatal("no virtualInbound")
	}
	for _, fc := range cfg.listeners[i].GetFilterChains() {
		fs := fc.GetFilters()
		if len(fs) < 2 || fs[0].GetName() != "istio.metadata_exchange" {
			t.Errorf("chain %s: filters %v do not begin with istio.metadata_exchange", fc.GetName(), names(fs))
			continue
		}
		last := fs[len(fs)-1]
		if last.GetName() != "envoy.filters.network.http_connection_manager" {
			if fs[len(fs)-2].GetName() != "istio.stats" {
				t.Errorf("chain %s: filters %v, no istio.stats before %s", fc.GetName(), names(fs), last.GetName())
			}
			continue
		}
		m := &hcmv3.HttpConnectionManager{}
		if err := last.GetTypedConfig().UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		hf := m.GetHttpFilters()
		if len(hf) < 3 || hf[0].GetName() != "istio.metadata_exchange" || hf[len(hf)-2].GetName() != "istio.stats" {
			var got []string
			for _, f := range hf {
				got = append(got, f.GetName())
			}
			t.Errorf("chain %s: HTTP filters %v, want istio.metadata_exchange first and istio.stats before the router", fc.GetName(), got)
		}
	}
	outbound := 0
	for _, c := range cfg.clusters {
		if len(c.GetName()) > 9 && c.GetName()[:9] == "outbound|" {
			outbound++
			if len(c.GetFilters()) != 1 || c.GetFilters()[0].GetName() != "istio.metadata_exchange" {
				t.Errorf("cluster %s: filters %v, want istio.metadata_exchange", c.GetName(), c.GetFilters())
			}
		}
	}
	if outbound == 0 {
		t.Error("no outbound cluster")
	}
}

func names(fs []*listenerv3.Filter) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.GetName())
	}
	return out
}
