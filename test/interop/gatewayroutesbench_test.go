package interop

import (
	"fmt"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/core"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"

	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// benchGatewayVSs are n VirtualServices bound to the gateway, each for
// its own host, with a few matches, weights, a header operation, a
// retry policy and a mirror: a busy ingress.
func benchGatewayVSs(n int) []gwVS {
	out := make([]gwVS, 0, n)
	for i := range n {
		out = append(out, gwVS{name: fmt.Sprintf("vs-%d", i), ns: "default", spec: &networkingv1.VirtualService{
			Hosts: []string{fmt.Sprintf("app-%d.example.com", i)}, Gateways: []string{gwRef},
			Http: []*networkingv1.HTTPRoute{
				{Name: "api", Match: []*networkingv1.HTTPMatchRequest{{Uri: prefix("/api/"), Headers: map[string]*networkingv1.StringMatch{"x-version": exact("v2")}}},
					Route: []*networkingv1.HTTPRouteDestination{
						{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v2"}, Weight: 90},
						{Destination: &networkingv1.Destination{Host: "reviews", Subset: "v3"}, Weight: 10},
					},
					Retries: &networkingv1.HTTPRetry{Attempts: 3, PerTryTimeout: dur(2 * time.Second), RetryOn: "5xx,503"}},
				{Name: "static", Match: []*networkingv1.HTTPMatchRequest{{Uri: regex("/static/[a-z0-9]+\\.(css|js)")}},
					Route: dst("ratings"), Headers: &networkingv1.Headers{Response: &networkingv1.Headers_HeaderOperations{Set: map[string]string{"cache-control": "max-age=60"}}}},
				{Name: "default", Route: dst("reviews"), Mirror: &networkingv1.Destination{Host: "mirror"}, MirrorPercentage: &networkingv1.Percent{Value: 5}, Timeout: dur(10 * time.Second)},
			},
		}})
	}
	return out
}

// BenchmarkGatewayRoutes builds the route configuration http.80 of a
// gateway with n bound VirtualServices: Istio's generator
// (BuildHTTPRoutes, which returns the marshalled resource) and ours
// (RouteVirtualHosts, then marshalled the same way), both reporting the
// marshalled size.
func BenchmarkGatewayRoutes(b *testing.B) {
	for _, n := range []int{100, 1000} {
		c := gwRouteCase{vss: benchGatewayVSs(n)}
		servers := []*networkingv1.Server{httpServer(80, "*")}
		b.Run(fmt.Sprintf("istio/vs=%d", n), func(b *testing.B) {
			silenceIstioLogs()
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			configs := []config.Config{{
				Meta: config.Meta{GroupVersionKind: gvk.Gateway, Name: "gateway", Namespace: gwNs, CreationTimestamp: base},
				Spec: &networkingv1.Gateway{Selector: gwLabels, Servers: servers},
			}}
			configs = append(configs, istioServiceEntries(base)...)
			for _, vs := range c.vss {
				configs = append(configs, config.Config{
					Meta: config.Meta{GroupVersionKind: gvk.VirtualService, Name: vs.name, Namespace: vs.ns, Domain: "cluster.local", CreationTimestamp: base},
					Spec: vs.spec,
				})
			}
			cg := core.NewConfigGenTest(b, core.TestOptions{Configs: configs})
			proxy := cg.SetupProxy(&model.Proxy{
				Type: model.Router, ConfigNamespace: gwNs, Labels: gwLabels, ID: "gw.istio-system",
				Metadata: &model.NodeMetadata{Namespace: gwNs, Labels: gwLabels},
			})
			req := &model.PushRequest{Push: cg.PushContext(), Forced: true}
			b.ResetTimer()
			for range b.N {
				res, _ := cg.ConfigGen.BuildHTTPRoutes(proxy, req, []string{"http.80"})
				if len(res) != 1 {
					b.Fatalf("%d resources", len(res))
				}
				b.ReportMetric(float64(len(res[0].GetResource().GetValue())), "bytes/route")
			}
		})
		b.Run(fmt.Sprintf("bulwark/vs=%d", n), func(b *testing.B) {
			snap, gw := ourGatewayWorld(c, servers)
			bound := []routes.BoundServer{{Gateway: gw, Server: servers[0]}}
			b.ResetTimer()
			for range b.N {
				vhs, problems := routes.Options{}.RouteVirtualHosts(snap, bound, routes.Proxy{Namespace: gwNs, Labels: gwLabels})
				if len(problems) != 0 || len(vhs) != n {
					b.Fatalf("%d virtual hosts, problems %v", len(vhs), problems)
				}
				raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(&routev3.RouteConfiguration{Name: "http.80", VirtualHosts: vhs})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(raw)), "bytes/route")
			}
		})
	}
}
