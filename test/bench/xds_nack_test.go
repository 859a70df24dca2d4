package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// BenchmarkXDSNACKStorm compares istiod's CPU time for NACKs with its CPU
// time for ACKs: 100 proxies each send 500 ACKs of their EDS response,
// then 500 NACKs of it. Neither may cause a response (a NACK answered with
// a re-push would loop), and a NACK should cost about what an ACK does.
func BenchmarkXDSNACKStorm(b *testing.B) {
	const proxies, each = 100, 500
	srv := startXDS(b, proxies)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := newFleet(b, srv.server, proxies)
	streams := make([]*nackStream, proxies)
	for i := range streams {
		streams[i] = openNACKStream(b, ctx, f, i)
	}
	var unexpected atomic.Int64
	round := func(probe int, nack bool) time.Duration {
		cpu0 := srv.cpuTime(b)
		var wg sync.WaitGroup
		for _, s := range streams {
			wg.Go(func() { unexpected.Add(s.storm(b, each, probe, nack)) })
		}
		wg.Wait()
		return srv.cpuTime(b) - cpu0
	}
	b.ResetTimer()
	acks := round(1, false)
	nacks := round(2, true)
	b.StopTimer()
	per1000 := func(d time.Duration) float64 { return d.Seconds() * 1000 / (proxies * each) }
	b.ReportMetric(per1000(acks), "cpu-s/1000-acks")
	b.ReportMetric(per1000(nacks), "cpu-s/1000-nacks")
	b.ReportMetric(nacks.Seconds()/acks.Seconds(), "nack/ack-cpu")
	b.ReportMetric(float64(unexpected.Load()), "responses")
	if unexpected.Load() != 0 {
		b.Errorf("%d responses to ACKs and NACKs of an unchanged model", unexpected.Load())
	}
}

// nackStream is one proxy's ADS stream, subscribed to echo's endpoints.
type nackStream struct {
	st       discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	eds      *discovery.DiscoveryResponse
	cdsNonce string // of the last probe's response
}

func openNACKStream(b *testing.B, ctx context.Context, f *fleet, i int) *nackStream {
	b.Helper()
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(f.tls)),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: proxyNode(i), TypeUrl: typeEndpoint, ResourceNames: []string{echoCluster}}); err != nil {
		b.Fatal(err)
	}
	eds, err := st.Recv()
	if err != nil {
		b.Fatal(err)
	}
	return &nackStream{st: st, eds: eds}
}

// storm sends n ACKs or NACKs of the EDS response, then a CDS request for
// a new name as a probe: the stream's requests are handled in order, so
// its response shows they all were. It returns the other responses seen.
func (s *nackStream) storm(b *testing.B, n, probe int, nack bool) int64 {
	req := &discovery.DiscoveryRequest{TypeUrl: typeEndpoint, ResourceNames: []string{echoCluster},
		VersionInfo: s.eds.GetVersionInfo(), ResponseNonce: s.eds.GetNonce()}
	if nack {
		req.VersionInfo = "" // what a proxy that rejected its first response reports
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "rejected by the benchmark"}
	}
	for range n {
		if err := s.st.Send(req); err != nil {
			b.Error(err)
			return 0
		}
	}
	err := s.st.Send(&discovery.DiscoveryRequest{TypeUrl: typeCluster, ResponseNonce: s.cdsNonce,
		ResourceNames: []string{echoCluster, fmt.Sprintf("outbound|%d||probe.%s.svc.cluster.local", probe, fleetNS)}})
	if err != nil {
		b.Error(err)
		return 0
	}
	var other int64
	for {
		r, err := s.st.Recv()
		if err != nil {
			b.Error(err)
			return other
		}
		if r.GetTypeUrl() == typeCluster {
			s.cdsNonce = r.GetNonce()
			return other
		}
		other++
	}
}
