package xds

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
)

// BenchmarkConvergence measures how long an endpoint change takes to reach
// N ADS clients, each on its own TCP connection over loopback, from the
// model publish to each client's receipt (it ACKs at once). The debounce
// is 1ms so that the push itself is measured.
func BenchmarkConvergence(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { benchConvergence(b, n) })
	}
}

func benchConvergence(b *testing.B, n int) {
	snaps := [2]*model.Snapshot{benchModel(b, "10.0.0.3"), benchModel(b, "10.0.0.4")}
	store := model.NewStore()
	store.Publish(snaps[0])
	srv, err := New(Config{
		Model: store, Authenticator: headerAuth{}, TrustDomain: testTD,
		DebounceQuiet: time.Millisecond, StreamRate: rate.Inf,
	})
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	wg.Go(func() { _ = gs.Serve(lis) })
	defer func() { cancel(); gs.Stop(); wg.Wait() }()

	received := make(chan time.Time, n)
	for i := range n {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		sctx := metadata.AppendToOutgoingContext(ctx, "x-id", clientID)
		st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
		if err != nil {
			b.Fatal(err)
		}
		node := testNode("app", "client", nil)
		node.Id = fmt.Sprintf("sidecar~10.1.%d.%d~c-%d.app~app.svc.cluster.local", i/250, i%250, i)
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster}}); err != nil {
			b.Fatal(err)
		}
		first, err := st.Recv()
		if err != nil {
			b.Fatal(err)
		}
		ack := func(r *discovery.DiscoveryResponse) error {
			return st.Send(&discovery.DiscoveryRequest{TypeUrl: grpcgen.EndpointType, ResourceNames: []string{echoCluster},
				VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		}
		if err := ack(first); err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				received <- time.Now()
				if ack(r) != nil {
					return
				}
			}
		}()
	}

	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		store.Publish(snaps[(i+1)%2])
		for range n {
			lat = append(lat, (<-received).Sub(start))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

func benchModel(b *testing.B, second string) *model.Snapshot {
	res := model.Resources{
		Services: []*model.Service{{Meta: model.Meta{Name: "echo", Namespace: "app"}, Selector: map[string]string{"app": "echo"},
			Ports: []model.Port{{Name: "grpc", Port: 8080}}}},
	}
	for _, addr := range []string{"10.0.0.2", second} {
		res.Workloads = append(res.Workloads, &model.Workload{Meta: model.Meta{Name: addr, Namespace: "app"},
			Spec: workloadEntry(addr)})
	}
	return model.Build(second, model.Options{}, res)
}
