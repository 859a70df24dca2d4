package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	typeRoute  = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	envoyTypes = 4
)

// envoyFleet is what simulated Envoy sidecars watch: the cluster whose
// endpoints change.
type envoyFleet struct {
	watched string
}

// meshModel is n services of namespace bench, each with an HTTP port and
// two sidecar endpoints (WorkloadEntries); svc-0's first endpoint is at
// moved.
func meshModel(n int, moved string) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `apiVersion: v1
kind: Service
metadata: {name: svc-%[1]d, namespace: %[2]s}
spec:
  selector: {app: svc-%[1]d}
  ports: [{name: http, port: 80, targetPort: 8080}]
`, i, fleetNS)
		for j := range 2 {
			addr := fmt.Sprintf("10.%d.%d.%d", 1+j, i/250, i%250+1)
			if i == 0 && j == 0 {
				addr = moved
			}
			fmt.Fprintf(&sb, `---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: svc-%[1]d-%[2]d, namespace: %[3]s}
spec:
  address: %[4]s
  labels: {app: svc-%[1]d, security.istio.io/tlsMode: istio}
  serviceAccount: svc-%[1]d
  ports: {http: 8080}
---
`, i, j, fleetNS, addr)
		}
	}
	return sb.String()
}

var watchedCluster = "outbound|80||svc-0." + fleetNS + ".svc.cluster.local"

// envoySession is one Delta ADS stream as Envoy runs it: every cluster,
// the endpoints of the EDS ones, every listener, the routes the listeners
// name; every response ACKed.
func (f *fleet) envoySession(ctx context.Context, p *simProxy) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(p.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	send := func(r *discovery.DeltaDiscoveryRequest) error {
		if err := st.Send(r); err != nil {
			return streamError(st, err)
		}
		return nil
	}
	if err := send(&discovery.DeltaDiscoveryRequest{Node: envoyNode(p.i), TypeUrl: typeCluster}); err != nil {
		return err
	}
	acked := map[string]bool{}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		typ := resp.GetTypeUrl()
		if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}); err != nil {
			return err
		}
		switch {
		case typ == typeCluster && !acked[typ]:
			var eds []string
			for _, r := range resp.GetResources() {
				if strings.HasPrefix(r.GetName(), "outbound|") {
					eds = append(eds, r.GetName())
				}
			}
			if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeEndpoint, ResourceNamesSubscribe: eds}); err != nil {
				return err
			}
			if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeListener}); err != nil {
				return err
			}
		case typ == typeListener && !acked[typ]:
			var routes []string
			for _, r := range resp.GetResources() {
				if port, ok := strings.CutPrefix(r.GetName(), "0.0.0.0_"); ok {
					routes = append(routes, port)
				}
			}
			if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeRoute, ResourceNamesSubscribe: routes}); err != nil {
				return err
			}
		case typ == typeEndpoint:
			for _, r := range resp.GetResources() {
				if r.GetName() == f.envoy.watched {
					f.observeEDS(p, r.GetVersion())
				}
			}
		}
		if !acked[typ] {
			acked[typ] = true
			if len(acked) == envoyTypes {
				f.ready.Add(1)
			}
		}
	}
}

// envoyNode is what pilot-agent sends for an injected sidecar: no
// GENERATOR, so istiod serves it Envoy's configuration.
func envoyNode(i int) *core.Node {
	ip := fmt.Sprintf("10.%d.%d.%d", 10+i>>16, i>>8&0xff, i&0xff)
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": fleetNS, "SERVICE_ACCOUNT": fleetSA, "INSTANCE_IPS": ip, "LABELS": map[string]any{"app": "client"},
	})
	if err != nil {
		panic(err)
	}
	return &core.Node{
		Id:       fmt.Sprintf("sidecar~%s~client-%d.%s~%s.svc.cluster.local", ip, i, fleetNS, fleetNS),
		Metadata: md,
	}
}

// BenchmarkXDSEnvoyConvergence measures, with 100 services, each Envoy
// sidecar's time from an endpoint change until it has received and ACKed
// the new load assignment, debounces included as in
// BenchmarkXDSConvergence.
func BenchmarkXDSEnvoyConvergence(b *testing.B) {
	const services = 100
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("clients=%d/services=%d", n, services), func(b *testing.B) {
			srv := startXDSWith(b, n, meshModel(services, "10.1.0.1"))
			ctx, cancel := context.WithTimeout(context.Background(), connectTimeout+convergeLimit+time.Minute)
			defer cancel()
			f := newFleet(b, srv.server, n)
			f.envoy = &envoyFleet{watched: watchedCluster}
			f.start(b, ctx, n)
			connect := f.waitReady(b, n, connectTimeout)
			f.converge(b, srv, connect, func() { writeModelText(b, srv.modelDir, meshModel(services, "10.9.0.1")) })
			b.Logf("connect: %s", f.progress())
		})
	}
}

// BenchmarkXDSEnvoyMemoryPerProxy compares istiod's memory, with 1,000
// services, before any proxy and with 1,000 Envoy sidecars connected and
// every type ACKed, after a garbage collection: the live heap it found,
// and the RSS once freed memory is returned.
func BenchmarkXDSEnvoyMemoryPerProxy(b *testing.B) {
	const n, services = 1000, 1000
	srv := startXDSWith(b, n, meshModel(services, "10.1.0.1"))
	time.Sleep(quiescence)
	rss0, live0 := srv.rss(b), srv.metric(b, "go_gc_heap_live_bytes")
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout+forcedGCPeriod+time.Minute)
	defer cancel()
	f := newFleet(b, srv.server, n)
	f.envoy = &envoyFleet{watched: watchedCluster}
	f.start(b, ctx, n)
	connect := f.waitReady(b, n, connectTimeout)
	time.Sleep(quiescence)
	rss1, live1 := srv.afterGC(b, time.Now())
	b.ReportMetric(float64(rss1-rss0)/1024/n, "rss-KiB/proxy")
	b.ReportMetric(float64(live1-live0)/1024/n, "live-heap-KiB/proxy")
	b.ReportMetric(float64(rss0)/(1<<20), "rss0-MiB")
	b.ReportMetric(float64(rss1)/(1<<20), "rss-MiB")
	b.ReportMetric(connect.Seconds(), "connect-s")
	b.ReportMetric(float64(f.retries.failures()), "failed-retries")
	b.Logf("connect: %s", f.progress())
}
