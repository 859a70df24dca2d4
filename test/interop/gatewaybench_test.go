package interop

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	corev1 "k8s.io/api/core/v1"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	istiomodel "istio.io/istio/pilot/pkg/model"
	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pilot/test/xdstest"
	"istio.io/istio/pkg/util/sets"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
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

// benchVirtualServices are one Gateway's HTTP server for every host and n
// VirtualServices bound to it, each for its own host, with a header and
// a regex match, weights, retries, a header operation and a mirror: a
// busy ingress.
func benchVirtualServices(n int) string {
	var b strings.Builder
	b.WriteString(istioGateway("gateway", "default", plainServer(80, "*")))
	for i := range n {
		b.WriteString(virtualService(fmt.Sprintf("vs-%04d", i), "default", fmt.Sprintf(`
hosts: [app-%d.example.com]
gateways: [gateway]
http:
- name: api
  match: [{uri: {prefix: /api/}, headers: {x-version: {exact: v2}}}]
  route:
  - {destination: {host: %[2]s, port: {number: 80}}, weight: 90}
  - {destination: {host: %[3]s, port: {number: 80}}, weight: 10}
  retries: {attempts: 3, perTryTimeout: 2s, retryOn: "5xx,503"}
- name: static
  match: [{uri: {regex: "/static/[a-z0-9]+\\.(css|js)"}}]
  route: [{destination: {host: %[4]s}}]
  headers: {response: {set: {cache-control: max-age=60}}}
- name: default
  route: [{destination: {host: %[2]s, port: {number: 80}}}]
  mirror: {host: %[4]s}
  mirrorPercentage: {value: 5}
  timeout: 10s`, i, vsEcho, vsLegacy, vsSleep)))
	}
	return b.String()
}

// BenchmarkGatewayGeneration is the listeners and routes (LDS, then RDS
// of every route they name) of the ingress gateway that n Gateways
// select, by Istio's generator and by envoygen, on the same objects; as
// BenchmarkSidecarGeneration, each push starts from nothing built: Istio's
// XDS cache is cleared (its push context, built before the loop, is
// kept), and ours gets a new generator and a new snapshot of the same
// objects (built with the timer stopped, its lazily built indexes not).
// Cases "gateways=n" have no VirtualService (every route is a server's
// blackhole one); "vs=n" are benchVirtualServices(n); "replicas=r" push
// to r pods of the gateway at once (one Deployment's replicas): Istio
// generates for each, as it caches no gateway listener or route; ours
// marshal each resource once per push and key, as pkg/xds's push state
// does (pushState.resource), so replicas share it. bytes/push is one
// replica's. Cases "after-change" are the push after one VirtualService
// changed: Istio's generator does what it does from scratch (it keeps
// nothing of a gateway's routes between pushes); ours keeps its
// generator, which translated the snapshot before, and generates from a
// snapshot that shares every other object with it, as the model source
// gives after one VirtualService event. Each push changes another one.
func BenchmarkGatewayGeneration(b *testing.B) {
	objects := decodeKube(b, gatewayWorld)
	var pod *corev1.Pod
	for _, o := range objects {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "istio-ingressgateway-1" {
			pod = p
		}
	}
	vs1000 := benchVirtualServices(1000)
	for _, bc := range []struct {
		name     string
		config   string
		replicas int
		change   bool
	}{
		{"gateways=100", benchGateways(100), 1, false},
		{"gateways=500", benchGateways(500), 1, false},
		{"vs=1000", vs1000, 1, false},
		{"vs=1000/replicas=10", vs1000, 10, false},
		{"after-change/vs=1000", vs1000, 1, true},
	} {
		cfgs, _, err := crd.ParseInputs(bc.config)
		if err != nil {
			b.Fatal(err)
		}
		for i := range cfgs {
			cfgs[i].Domain = "cluster.local"
		}
		b.Run("istio/"+bc.name, func(b *testing.B) {
			silenceIstioLogs()
			s := xds.NewFakeDiscoveryServer(b, xds.FakeOptions{Configs: cfgs, KubernetesObjectString: gatewayWorld, MeshConfig: gatewayMeshConfig()})
			var proxies []*istiomodel.Proxy
			for i := range bc.replicas {
				replica := pod.DeepCopy()
				replica.Name = fmt.Sprintf("%s-%d", pod.Name, i)
				proxies = append(proxies, istioRouter(s, replica, false))
			}
			routes := xdstest.ExtractRoutesFromListeners(s.Listeners(proxies[0]))
			watched := map[string]*istiomodel.WatchedResource{
				v3.RouteType: {TypeUrl: v3.RouteType, ResourceNames: sets.New(routes...)},
			}
			for b.Loop() {
				b.StopTimer()
				s.Discovery.Cache.ClearAll()
				b.StartTimer()
				size := 0
				for i, proxy := range proxies {
					for _, typeURL := range []string{v3.ListenerType, v3.RouteType} {
						res, _, err := s.Discovery.Generators[typeURL].Generate(proxy, watched[typeURL], &istiomodel.PushRequest{Push: s.PushContext(), Forced: true})
						if err != nil || len(res) == 0 {
							b.Fatalf("%s: %d resources, %v", typeURL, len(res), err)
						}
						for _, r := range res {
							if i == 0 {
								size += len(r.GetResource().GetValue())
							}
						}
					}
				}
				b.ReportMetric(float64(size), "bytes/push")
			}
		})
		b.Run("bulwark/"+bc.name, func(b *testing.B) {
			snap := ourSnapshot(b, objects, bc.config)
			g, p := ourRouterSetup(gatewayCase{}, pod)
			if bc.change {
				benchOurGateway(b, g, p, snap, bc.replicas) // the push before
			}
			var version [sha256.Size]byte
			pushes := 0
			for b.Loop() {
				if bc.change {
					b.StopTimer()
					snap = withOneVirtualServiceChanged(snap, pushes)
					b.StartTimer()
				} else {
					// A generator of its own and a snapshot of its own
					// each push: nothing an earlier push built (routes,
					// translations, indexes a snapshot makes when first
					// asked) is there to be reused.
					b.StopTimer()
					g, p = ourRouterSetup(gatewayCase{}, pod)
					snap = freshSnapshot(snap, pushes)
					b.StartTimer()
				}
				size, v := benchOurGateway(b, g, p, snap, bc.replicas)
				b.ReportMetric(float64(size), "bytes/push")
				version = v
				pushes++
			}
			_ = version
		})
	}
}

// benchOurGateway is one push of the listeners and routes of router p to
// replicas pods, each resource marshalled once per key: one replica's
// size, and the hash of the last resource.
func benchOurGateway(b *testing.B, g *envoygen.Generator, p *envoygen.Proxy, snap *model.Snapshot, replicas int) (int, [sha256.Size]byte) {
	var version [sha256.Size]byte
	size := 0
	marshalled := map[string][]byte{}
	for i := range replicas {
		for _, typeURL := range []string{resource.ListenerType, resource.RouteType} {
			res := g.Generate(snap, p, typeURL, nil, true)
			if len(res) == 0 {
				b.Fatalf("%s: no resources", typeURL)
			}
			for _, r := range res {
				raw, ok := marshalled[r.Key]
				if !ok {
					var err error
					if raw, err = r.Marshal(); err != nil {
						b.Fatal(err)
					}
					marshalled[r.Key] = raw
					version = sha256.Sum256(raw)
				}
				if i == 0 {
					size += len(raw)
				}
			}
		}
	}
	return size, version
}

// freshSnapshot is a snapshot of snap's objects that shares nothing built
// from them with snap: what a push from scratch starts from.
func freshSnapshot(snap *model.Snapshot, n int) *model.Snapshot {
	return model.BuildShared(fmt.Sprintf("%s/fresh%d", snap.Version, n), snap.Options, *snap.Resources(), nil)
}

// withOneVirtualServiceChanged is snap with its n-th VirtualService (of
// those with HTTP rules, counted round) given another timeout, every other
// object shared, as the model source builds the snapshot after one
// VirtualService event.
func withOneVirtualServiceChanged(snap *model.Snapshot, n int) *model.Snapshot {
	res := *snap.Resources()
	res.VirtualServices = slices.Clone(res.VirtualServices)
	i := n % len(res.VirtualServices)
	vs := *res.VirtualServices[i]
	vs.Spec = proto.CloneOf(vs.Spec)
	for _, r := range vs.Spec.GetHttp() {
		r.Timeout = durationpb.New(time.Duration(n%50+1) * time.Second)
	}
	res.VirtualServices[i] = &vs
	return model.BuildShared(fmt.Sprintf("%s+%d", snap.Version, n), snap.Options, res, snap)
}
