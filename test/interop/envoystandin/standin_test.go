package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"istio.io/istio/pilot/cmd/pilot-agent/status/util"
)

func TestParseArgsTakesPilotAgentsCommandLine(t *testing.T) {
	// As pkg/envoy/proxy.go builds it, with a log level and concurrency.
	args := []string{"-c", "etc/istio/proxy/envoy-rev.json", "--drain-time-s", "45", "--drain-strategy", "immediate",
		"--local-address-ip-version", "v4", "--file-flush-interval-msec", "1000", "--disable-hot-restart",
		"--allow-unknown-static-fields", "-l", "warning", "--component-log-level", "misc:error", "--concurrency", "2",
		"--some-future-flag", "--another=1"}
	o, err := parseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	if o.configPath != "etc/istio/proxy/envoy-rev.json" {
		t.Errorf("config path %q", o.configPath)
	}
	if want := 11; len(o.ignored) != want {
		t.Errorf("ignored %d flags %v, want %d", len(o.ignored), o.ignored, want)
	}
	if _, err := parseArgs([]string{"--concurrency", "2"}); err == nil {
		t.Error("no -c: want an error")
	}
}

// The readiness probe of pilot-agent itself reads the stand-in's stats.
func TestAdminServesPilotAgentsReadinessStats(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	st := newStore("", slog.New(slog.NewTextHandler(io.Discard, nil)))
	st.setStart(nil, &bootInfo{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveAdmin(ctx, addr, st, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() { cancel(); <-done }()
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)

	var state *uint64
	var workers bool
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if state, workers, err = util.GetReadinessStats("127.0.0.1", uint16(port)); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || state == nil || *state != 3 || workers {
		t.Fatalf("before LIVE: state %v, workers %v, err %v; want INITIALIZING (3), not started", state, workers, err)
	}
	st.update(func(s *State) {
		s.Stats["server.state"], s.Stats["listener_manager.workers_started"] = 0, 1
		s.Stats["cluster_manager.cds.update_success"], s.Stats["listener_manager.lds.update_success"] = 1, 2
	})
	if state, workers, err = util.GetReadinessStats("127.0.0.1", uint16(port)); err != nil || *state != 0 || !workers {
		t.Errorf("LIVE: state %v, workers %v, err %v", state, workers, err)
	}
	s, err := util.GetUpdateStatusStats("127.0.0.1", uint16(port))
	if err != nil || s.CDSUpdatesSuccess != 1 || s.LDSUpdatesSuccess != 2 {
		t.Errorf("update stats %v, %v", s, err)
	}
	st.read(func(s *State) {
		var keys []string
		for k := range s.Admin {
			keys = append(keys, k)
		}
		if len(keys) != 2 || !strings.HasPrefix(strings.Join(keys, ""), "GET /stats?usedonly&filter=") {
			t.Errorf("admin requests %v", keys)
		}
	})
}

func TestDuplicateChains(t *testing.T) {
	port := func(p uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(p) }
	chain := func(name string, m *listenerv3.FilterChainMatch) *listenerv3.FilterChain {
		return &listenerv3.FilterChain{Name: name, FilterChainMatch: m}
	}
	cases := map[string]struct {
		chains []*listenerv3.FilterChain
		ok     bool
	}{
		"distinct ports and transports are accepted": {chains: []*listenerv3.FilterChain{
			chain("a", &listenerv3.FilterChainMatch{DestinationPort: port(80), TransportProtocol: "tls"}),
			chain("b", &listenerv3.FilterChainMatch{DestinationPort: port(80), TransportProtocol: "raw_buffer"}),
			chain("c", &listenerv3.FilterChainMatch{DestinationPort: port(81)}),
			chain("d", nil),
		}, ok: true},
		"two chains without a match are refused": {chains: []*listenerv3.FilterChain{chain("a", nil), chain("b", &listenerv3.FilterChainMatch{})}},
		"overlapping ALPN lists are refused": {chains: []*listenerv3.FilterChain{
			chain("a", &listenerv3.FilterChainMatch{TransportProtocol: "tls", ApplicationProtocols: []string{"istio", "istio-h2"}}),
			chain("b", &listenerv3.FilterChainMatch{TransportProtocol: "tls", ApplicationProtocols: []string{"istio-h2"}}),
		}},
		"the same prefix range is refused": {chains: []*listenerv3.FilterChain{
			chain("a", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{{AddressPrefix: "10.0.0.1", PrefixLen: wrapperspb.UInt32(32)}}}),
			chain("b", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{{AddressPrefix: "10.0.0.1", PrefixLen: wrapperspb.UInt32(32)}}}),
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := duplicateChains(&listenerv3.Listener{Name: "l", FilterChains: tc.chains})
			if (err == nil) != tc.ok {
				t.Errorf("duplicateChains: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
