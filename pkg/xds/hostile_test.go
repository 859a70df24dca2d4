package xds

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// TestStreamBurstIsShed opens 10,000 streams at once (2,000 under the race
// detector) on one in-process connection: those beyond the burst get
// ResourceExhausted, and the others are served. It logs the heap the burst
// left in use and how long it took.
func TestStreamBurstIsShed(t *testing.T) {
	const burst = 100
	streams := int64(10000)
	if raceEnabled {
		streams = 2000
	}
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) { c.StreamRate, c.StreamBurst = 0.0001, burst })
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-id", clientID)
	client := discovery.NewAggregatedDiscoveryServiceClient(h.conn)
	var served, shed atomic.Int64
	var wg sync.WaitGroup
	heap0 := heapInuse()
	start := time.Now()
	for range streams {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := client.StreamAggregatedResources(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			_ = st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}})
			_, err = st.Recv()
			switch status.Code(err) {
			case codes.OK:
				served.Add(1)
			case codes.ResourceExhausted:
				shed.Add(1)
			default:
				t.Errorf("stream: %v", err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d streams in %s; heap in use grew by %.1f MiB", streams, time.Since(start).Round(time.Millisecond), float64(heapInuse()-heap0)/(1<<20))
	if served.Load() != burst || shed.Load() != streams-burst {
		t.Fatalf("%d served and %d shed, want %d and %d", served.Load(), shed.Load(), burst, streams-burst)
	}
}

func heapInuse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// Streams whose turn comes within StreamWait wait for it instead of being
// refused; the rest are refused at once.
func TestStreamsWaitBrieflyForTheirTurn(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) {
		c.StreamRate, c.StreamBurst, c.StreamWait = 10, 1, time.Second
	})
	open := func(n int) (served, shed int64) {
		var ok, exhausted atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				st := h.stream(clientID)
				_ = st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: grpcgen.ListenerType, ResourceNames: []string{echoListener}})
				_, err := st.Recv()
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					exhausted.Add(1)
				default:
					t.Errorf("stream: %v", err)
				}
			})
		}
		wg.Wait()
		return ok.Load(), exhausted.Load()
	}
	// Five turns come within 0.4 s: all wait and are served.
	if served, shed := open(5); served != 5 || shed != 0 {
		t.Fatalf("%d served and %d refused, want 5 and 0", served, shed)
	}
	// Of 40 at once, about 11 turns come within a second.
	served, shed := open(40)
	if served < 5 || served > 15 || served+shed != 40 {
		t.Fatalf("%d served and %d refused of 40, want about 11 served", served, shed)
	}
}

// TestDeltaSubscriptionsAreBounded: a client may subscribe to
// DefaultMaxNames names of a type, in one request or many; past that its
// stream ends with InvalidArgument, as does a request naming more.
func TestDeltaSubscriptionsAreBounded(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, baseManifests), nil)
	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	for name, reqs := range map[string][][]string{
		"one request naming too many":      {names("a", DefaultMaxNames+1)},
		"requests naming too many in turn": {names("a", DefaultMaxNames/2), names("b", DefaultMaxNames/2), {"one-more"}},
	} {
		t.Run(name, func(t *testing.T) {
			st := h.deltaStream(clientID)
			for i, sub := range reqs {
				req := &discovery.DeltaDiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResourceNamesSubscribe: sub}
				if i == 0 {
					req.Node = testNode("app", "client", nil)
				}
				if err := st.Send(req); err != nil {
					t.Fatal(err)
				}
			}
			for {
				_, err := st.Recv()
				if err == nil {
					continue // names that exist: nothing is sent for names that do not
				}
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("stream ended with %v, want InvalidArgument", err)
				}
				return
			}
		})
	}
}
