package xds

import (
	"fmt"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// rulesBenchModel is sidecarBenchModel(n) with port 80 declared HTTP, and
// rules, a manifest formatted with round.
func rulesBenchModel(b *testing.B, n, round int, rules func(round int) string) *model.Snapshot {
	snap := sidecarBenchModel(b, n)
	res := *snap.Resources()
	for _, svc := range res.Services {
		svc.Ports[0].Protocol = "HTTP"
	}
	if rules != nil {
		loaded := modeltest.Load(b, rules(round)).Resources()
		res.VirtualServices, res.DestinationRules = loaded.VirtualServices, loaded.DestinationRules
	}
	return model.Build(fmt.Sprintf("rules-%d-%d", n, round), model.Options{}, res)
}

// splitOf is a VirtualService of namespace ns, seen there alone, splitting
// svc-0's HTTP port with svc-1, its weights moving with round.
func splitOf(ns string) func(round int) string {
	return func(round int) string {
		return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: split, namespace: %s}
spec:
  hosts: [svc-0.bench.svc.cluster.local]
  exportTo: ["."]
  http:
  - route:
    - {destination: {host: svc-0.bench.svc.cluster.local}, weight: %d}
    - {destination: {host: svc-1.bench.svc.cluster.local}, weight: %d}
`, ns, 90-(round+2)%2*10, 10+(round+2)%2*10)
	}
}

// benchRuleChanges is benchChanges for rules(round) on rulesBenchModel:
// the fleet connects to round -1's model; each round pushes the next and
// takes every response queued, decoding it as a client would. It reports
// the sidecars sent anything per push, which check verifies, and the
// time of the push alone (generating and queuing every response).
func benchRuleChanges(b *testing.B, rules func(round int) string, check func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse)) {
	for _, size := range []struct{ services, proxies int }{{100, 200}, {500, 1000}} {
		b.Run(fmt.Sprintf("services=%d/proxies=%d", size.services, size.proxies), func(b *testing.B) {
			srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
			if err != nil {
				b.Fatal(err)
			}
			srv.push(rulesBenchModel(b, size.services, -1, rules), time.Time{})
			fleet := connectBenchSidecars(b, srv, srv.state.Load().snap, size.proxies)
			pushed, pushing := 0, time.Duration(0)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				snap := rulesBenchModel(b, size.services, i, rules)
				b.StartTimer()
				start := time.Now()
				srv.push(snap, time.Time{})
				pushing += time.Since(start)
				sent := make([][]*discovery.DeltaDiscoveryResponse, len(fleet))
				for k, s := range fleet {
					sent[k] = s.drain(b)
					if len(sent[k]) > 0 {
						pushed++
					}
				}
				check(b, sent)
			}
			b.ReportMetric(float64(pushed)/float64(b.N), "pushed/op")
			b.ReportMetric(float64(pushing.Microseconds())/1000/float64(b.N), "push-ms/op")
		})
	}
}

// BenchmarkVirtualServiceChange is a VirtualService splitting one service
// of a mesh of M services edited (its weights) while N sidecars are
// connected: seen by every sidecar, each is sent the one route that
// changed; of another namespace, none is sent anything.
func BenchmarkVirtualServiceChange(b *testing.B) {
	b.Run("seen", func(b *testing.B) {
		benchRuleChanges(b, splitOf("bench"), func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse) {
			for _, resps := range sent {
				if len(resps) != 1 || resps[0].GetTypeUrl() != resource.RouteType || len(resps[0].GetResources()) != 1 {
					b.Fatalf("%d responses for a VirtualService change, want one route", len(resps))
				}
			}
		})
	})
	b.Run("unseen", func(b *testing.B) {
		benchRuleChanges(b, splitOf("elsewhere"), func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse) {
			for _, resps := range sent {
				if len(resps) != 0 {
					b.Fatalf("%d responses for a VirtualService no sidecar sees", len(resps))
				}
			}
		})
	})
}

// BenchmarkDestinationRuleChange is the DestinationRule of one service of
// a mesh of M services edited (its TLS mode) while N sidecars are
// connected: each is sent that service's clusters.
func BenchmarkDestinationRuleChange(b *testing.B) {
	benchRuleChanges(b, func(round int) string {
		return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: svc-0, namespace: bench}
spec:
  host: svc-0.bench.svc.cluster.local
  trafficPolicy: {tls: {mode: %s}}
`, []string{"ISTIO_MUTUAL", "DISABLE"}[(round+2)%2])
	}, func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse) {
		for _, resps := range sent {
			if len(resps) == 0 || resps[0].GetTypeUrl() != resource.ClusterType || len(resps[0].GetResources()) > 2 {
				b.Fatal("a sidecar was not sent the service's clusters alone")
			}
		}
	})
}
