package xds

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// benchSidecar is a connected Envoy sidecar without a transport: its
// responses are taken off its queue and acknowledged in place.
type benchSidecar struct {
	p     *proxy
	nonce int
}

// connectBenchSidecars connects a sidecar for each of the n pods of
// sidecarBenchModel, each subscribed as Envoy subscribes over Delta ADS.
func connectBenchSidecars(b *testing.B, srv *Server, snap *model.Snapshot, n int) []*benchSidecar {
	b.Helper()
	var out []*benchSidecar
	for i, pod := range snap.Resources().Pods {
		if i == n {
			break
		}
		p := newProxy(srv, int64(-i-1), true)
		p.node = envoyNode(pod.Namespace, pod.ServiceAccount, pod.IPs[0])
		// ClusterID as bindCluster sets it for every proxy istiod serves.
		p.wl = &identity.Workload{Envoy: true, Namespace: pod.Namespace, ServiceAccount: pod.ServiceAccount, Pod: pod.Name, IPs: pod.IPs, ClusterID: "Kubernetes"}
		srv.mu.Lock()
		srv.streams[p.streamID] = p
		srv.mu.Unlock()
		s := &benchSidecar{p: p}
		s.request(b, resource.ClusterType, nil) // and the endpoints of its clusters
		var rds []string
		for _, r := range s.request(b, resource.ListenerType, nil) {
			if port, ok := strings.CutPrefix(r.GetName(), "0.0.0.0_"); ok {
				if _, err := strconv.Atoi(port); err == nil {
					rds = append(rds, port)
				}
			}
		}
		s.request(b, resource.RouteType, rds)
		out = append(out, s)
	}
	return out
}

// benchFleet is a server of sidecarBenchModel(services) with a sidecar of
// each of its first proxies pods connected.
func benchFleet(b *testing.B, services, proxies int) (*Server, []*benchSidecar) {
	b.Helper()
	srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		b.Fatal(err)
	}
	srv.push(sidecarBenchModel(b, services), time.Time{})
	return srv, connectBenchSidecars(b, srv, srv.state.Load().snap, proxies)
}

// request subscribes to names of typeURL and returns the answer,
// acknowledged.
func (s *benchSidecar) request(b *testing.B, typeURL string, names []string) []*discovery.Resource {
	b.Helper()
	if err := s.p.deltaRequest(typeURL, &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}); err != nil {
		b.Fatal(err)
	}
	resps := s.drain(b)
	if len(resps) == 0 || resps[0].GetTypeUrl() != typeURL {
		b.Fatalf("%s: no response", typeURL)
	}
	return decodeDelta(b, resps[0]).GetResources()
}

// drain takes every queued response off the sidecar's queue and
// acknowledges it, as Envoy would, subscribing to the endpoints of new
// outbound clusters, until nothing more is queued.
func (s *benchSidecar) drain(b *testing.B) []*discovery.DeltaDiscoveryResponse {
	var out []*discovery.DeltaDiscoveryResponse
	for {
		select {
		case resp := <-s.p.deltaOut:
			s.nonce++
			resp.Nonce = strconv.Itoa(s.nonce)
			s.p.respondedDelta(resp)
			out = append(out, resp)
			s.p.received(resp.GetTypeUrl(), resp.GetNonce(), nil)
			if err := s.p.deltaRequest(resp.GetTypeUrl(), &discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
				b.Fatal(err)
			}
			if resp.GetTypeUrl() != resource.ClusterType {
				continue
			}
			var eds []string
			for _, r := range decodeDelta(b, resp).GetResources() {
				if strings.HasPrefix(r.GetName(), "outbound|") && !s.p.asksEndpointsLocked(r.GetName()) {
					eds = append(eds, r.GetName())
				}
			}
			if len(eds) > 0 {
				if err := s.p.deltaRequest(resource.EndpointType, &discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: eds}); err != nil {
					b.Fatal(err)
				}
			}
		default:
			return out
		}
	}
}

// decodeDelta decodes resp as a client would: its resources were encoded
// for the wire.
func decodeDelta(b *testing.B, resp *discovery.DeltaDiscoveryResponse) *discovery.DeltaDiscoveryResponse {
	raw, err := Codec().Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	var decoded discovery.DeltaDiscoveryResponse
	if err := Codec().Unmarshal(raw, &decoded); err != nil {
		b.Fatal(err)
	}
	return &decoded
}

// movedEndpoint is sidecarBenchModel with the first pod of service k at
// another address, as when it is replaced.
func movedEndpoint(b *testing.B, n, k, round int) *model.Snapshot {
	snap := sidecarBenchModel(b, n)
	svc := snap.Resources().Services[k]
	addr := fmt.Sprintf("10.9.%d.%d", round/250%250, round%250+1)
	old := svc.Endpoints[80][0].Address
	for port, eps := range svc.Endpoints {
		for i := range eps {
			if eps[i].Address == old {
				svc.Endpoints[port][i].Address = addr
			}
		}
	}
	for _, pod := range snap.Resources().Pods {
		if len(pod.IPs) > 0 && pod.IPs[0] == old {
			pod.IPs = []string{addr}
		}
	}
	return model.Build(fmt.Sprintf("moved-%d-%d", k, round), model.Options{}, *snap.Resources())
}

// benchChanges pushes next(services, i), round after round, to fleets of
// each size: the push, and every response queued, taken and acknowledged
// (check sees them, per sidecar).
func benchChanges(b *testing.B, next func(b *testing.B, services, i int) *model.Snapshot, check func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse)) {
	for _, size := range []struct{ services, proxies int }{{100, 200}, {500, 1000}, {1000, 200}} {
		b.Run(fmt.Sprintf("services=%d/proxies=%d", size.services, size.proxies), func(b *testing.B) {
			srv, fleet := benchFleet(b, size.services, size.proxies)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				snap := next(b, size.services, i)
				b.StartTimer()
				srv.push(snap, time.Time{})
				sent := make([][]*discovery.DeltaDiscoveryResponse, len(fleet))
				for k, s := range fleet {
					sent[k] = s.drain(b)
				}
				check(b, sent)
			}
		})
	}
}

// BenchmarkEndpointMove is one pod of a mesh of M services replaced (its
// endpoint moves to another address) while N sidecars are connected, each
// subscribed to everything. The pods whose sidecars are connected stay;
// each sidecar is sent the one load assignment that changed.
func BenchmarkEndpointMove(b *testing.B) {
	benchChanges(b, func(b *testing.B, services, i int) *model.Snapshot {
		return movedEndpoint(b, services, services-1, i) // a service whose pods run no connected sidecar
	}, func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse) {
		for _, resps := range sent {
			if len(resps) != 1 || resps[0].GetTypeUrl() != resource.EndpointType {
				b.Fatalf("%d responses for an endpoint move, want one load assignment", len(resps))
			}
		}
	})
}

// BenchmarkNewService is a Service added to a mesh of M services, then
// removed, while N sidecars are connected: the push of its cluster,
// listeners and routes, each sidecar's request for the new cluster's
// endpoints and its answer.
func BenchmarkNewService(b *testing.B) {
	benchChanges(b, func(b *testing.B, services, i int) *model.Snapshot {
		return sidecarBenchModel(b, services+1-i%2)
	}, func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse) {
		for _, resps := range sent {
			if len(resps) == 0 {
				b.Fatal("a sidecar was sent nothing")
			}
		}
	})
}

// BenchmarkPolicyChange is an AuthorizationPolicy of a mesh of M services
// edited while N sidecars are connected (the methods it allows change).
func BenchmarkPolicyChange(b *testing.B) {
	benchChanges(b, func(b *testing.B, services, i int) *model.Snapshot {
		snap := sidecarBenchModel(b, services)
		op := snap.Resources().AuthorizationPolicies[0].Spec.GetRules()[0].GetTo()[0].GetOperation()
		op.Methods = []string{[]string{"POST", "GET"}[i%2]}
		return model.Build(fmt.Sprintf("policy-%d", i), model.Options{}, *snap.Resources())
	}, func(b *testing.B, sent [][]*discovery.DeltaDiscoveryResponse) {
		if slices.IndexFunc(sent, func(r []*discovery.DeltaDiscoveryResponse) bool { return len(r) > 0 }) < 0 {
			b.Fatal("nothing was sent")
		}
	})
}

// BenchmarkFleetMemory reports the live heap per connected sidecar once a
// fleet holds its full configuration: what the server keeps per proxy,
// and its share of what it keeps once for all.
func BenchmarkFleetMemory(b *testing.B) {
	for _, size := range []struct{ services, proxies int }{{500, 1000}, {1000, 200}} {
		b.Run(fmt.Sprintf("services=%d/proxies=%d", size.services, size.proxies), func(b *testing.B) {
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				srv, fleet := benchFleet(b, size.services, size.proxies)
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/1024/float64(len(fleet)), "heap-KiB/proxy")
				runtime.KeepAlive(srv)
			}
		})
	}
}
