package envoygen

import (
	"fmt"
	"testing"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// BenchmarkSplitHorizonLoadAssignment encodes the load assignment of a
// service of 1,000 endpoints, half on another network, for a proxy of
// the first: with that network's two gateways, and without any (its
// endpoints left out).
func BenchmarkSplitHorizonLoadAssignment(b *testing.B) {
	var eps []model.Endpoint
	for i := range 1000 {
		net, cluster := "net1", "c1"
		if i%2 == 1 {
			net, cluster = "net2", "c2"
		}
		eps = append(eps, model.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i%2, i/256, i%256), Port: 8080, Namespace: "app",
			ServiceAccount: "echo", Network: net, Cluster: cluster, Locality: fmt.Sprintf("r/z%d", i%3),
			Labels: map[string]string{model.TLSModeLabel: "istio", model.NetworkLabel: net}})
	}
	echo := &model.Service{Meta: model.Meta{Name: "echo", Namespace: "app"}, Addresses: []string{"10.96.0.10"},
		Ports: []model.Port{{Name: "http", Port: 80, TargetPort: 8080}}, Endpoints: map[uint32][]model.Endpoint{80: eps}}
	gw := &model.Service{Meta: model.Meta{Name: "eastwest", Namespace: "istio-system"}, Ports: []model.Port{{Name: "tls", Port: 15443}},
		Exposures: []model.Exposure{{Cluster: "c2", Network: "net2", Addresses: []string{"198.51.100.7", "198.51.100.8"}, Ports: []uint32{15443}}}}
	for name, svcs := range map[string][]*model.Service{"gateways": {echo, gw}, "none": {echo}} {
		b.Run(name, func(b *testing.B) {
			snap := model.Build("v1", model.Options{}, model.Resources{Services: svcs})
			g := &Generator{TrustDomain: td}
			p := &Proxy{Namespace: "app", Network: "net1"}
			names := []string{"outbound|80||echo.app.svc.cluster.local"}
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range g.Generate(snap, p, resource.EndpointType, names, false) {
					if _, err := r.Marshal(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
