package interop

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pilot/test/xdstest"
	"istio.io/istio/pkg/util/sets"

	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// benchGateways are n Gateways selecting the ingress gateway, each with
// an HTTP server and a terminated HTTPS server of its own host.
func benchGateways(n int) string {
	var b strings.Builder
	for i := range n {
		host := fmt.Sprintf("h%d.example.com", i)
		b.WriteString(istioGateway(fmt.Sprintf("gw-%04d", i), "default",
			plainServer(80, host),
			terminatedServer(443, "https", fmt.Sprintf("{mode: SIMPLE, credentialName: cert-%d}", i), host)))
	}
	return b.String()
}

// BenchmarkGatewayGeneration is the listeners and routes (LDS, then RDS
// of every route they name) of the ingress gateway that n Gateways
// select, by Istio's generator and by envoygen, on the same objects; as
// BenchmarkSidecarGeneration, each push starts from nothing built.
// (Without VirtualServices: every route is a server's blackhole one.)
func BenchmarkGatewayGeneration(b *testing.B) {
	objects := decodeKube(b, gatewayWorld)
	var pod *corev1.Pod
	for _, o := range objects {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "istio-ingressgateway-1" {
			pod = p
		}
	}
	for _, n := range []int{100, 500} {
		cfgs, _, err := crd.ParseInputs(benchGateways(n))
		if err != nil {
			b.Fatal(err)
		}
		for i := range cfgs {
			cfgs[i].Domain = "cluster.local"
		}
		b.Run(fmt.Sprintf("istio/gateways=%d", n), func(b *testing.B) {
			silenceIstioLogs(b)
			s := xds.NewFakeDiscoveryServer(b, xds.FakeOptions{Configs: cfgs, KubernetesObjectString: gatewayWorld, MeshConfig: gatewayMeshConfig()})
			proxy := istioRouter(s, pod, false)
			routes := xdstest.ExtractRoutesFromListeners(s.Listeners(proxy))
			watched := map[string]*istiomodel.WatchedResource{
				v3.RouteType: {TypeUrl: v3.RouteType, ResourceNames: sets.New(routes...)},
			}
			for b.Loop() {
				b.StopTimer()
				s.Discovery.Cache.ClearAll()
				b.StartTimer()
				size := 0
				for _, typeURL := range []string{v3.ListenerType, v3.RouteType} {
					res, _, err := s.Discovery.Generators[typeURL].Generate(proxy, watched[typeURL], &istiomodel.PushRequest{Push: s.PushContext(), Forced: true})
					if err != nil || len(res) == 0 {
						b.Fatalf("%s: %d resources, %v", typeURL, len(res), err)
					}
					for _, r := range res {
						size += len(r.GetResource().GetValue())
					}
				}
				b.ReportMetric(float64(size), "bytes/push")
			}
		})
		b.Run(fmt.Sprintf("bulwark/gateways=%d", n), func(b *testing.B) {
			snap := ourSnapshot(b, objects, benchGateways(n))
			g, p := ourRouterSetup(gatewayCase{}, pod)
			var version [sha256.Size]byte
			for b.Loop() {
				size := 0
				for _, typeURL := range []string{resource.ListenerType, resource.RouteType} {
					res := g.Generate(snap, p, typeURL, nil, true)
					if len(res) == 0 {
						b.Fatalf("%s: no resources", typeURL)
					}
					for _, r := range res {
						raw, err := r.Marshal()
						if err != nil {
							b.Fatal(err)
						}
						version = sha256.Sum256(raw)
						size += len(raw)
					}
				}
				b.ReportMetric(float64(size), "bytes/push")
			}
			_ = version
		})
	}
}
