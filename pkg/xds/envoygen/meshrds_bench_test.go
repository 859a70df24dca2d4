package envoygen

import (
	"fmt"
	"testing"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// routesBenchModel is n services of 10 namespaces, each with HTTP port
// 80, and with vs a VirtualService for each: a prefix rule with a
// timeout, then the service.
func routesBenchModel(n int, vs bool) *model.Snapshot {
	var res model.Resources
	for i := range n {
		name, ns := fmt.Sprintf("svc-%d", i), fmt.Sprintf("ns-%d", i%10)
		res.Services = append(res.Services, &model.Service{
			Meta: model.Meta{Name: name, Namespace: ns}, Selector: map[string]string{"app": name},
			Addresses: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			Ports:     []model.Port{{Name: "http", Port: 80, TargetPort: 8080, Protocol: "TCP"}},
		})
		if !vs {
			continue
		}
		host := name + "." + ns + ".svc.cluster.local"
		res.VirtualServices = append(res.VirtualServices, &model.VirtualService{Meta: model.Meta{Name: name, Namespace: ns}, Spec: &networkingv1.VirtualService{
			Hosts: []string{host},
			Http: []*networkingv1.HTTPRoute{{
				Match: []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/api"}}}},
				Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: host}}},
			}, {
				Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: host}}},
			}},
		}})
	}
	return model.Build("bench", model.Options{}, res)
}

// BenchmarkSidecarRoutes builds and marshals every route of one sidecar
// of 1,000 services, without and with a VirtualService for each.
func BenchmarkSidecarRoutes(b *testing.B) {
	for _, vs := range []bool{false, true} {
		b.Run(fmt.Sprintf("virtualServices=%v", vs), func(b *testing.B) {
			snap := routesBenchModel(1000, vs)
			g := &Generator{TrustDomain: td}
			p := &Proxy{Namespace: "ns-0", Labels: map[string]string{"app": "client"}}
			b.ReportAllocs()
			size := 0
			for b.Loop() {
				size = 0
				for _, r := range g.Generate(snap, p, resource.RouteType, nil, true) {
					raw, err := r.Marshal()
					if err != nil {
						b.Fatal(err)
					}
					size += len(raw)
				}
			}
			b.ReportMetric(float64(size), "bytes/proxy")
		})
	}
}
