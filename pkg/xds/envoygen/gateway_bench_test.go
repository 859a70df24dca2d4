package envoygen

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// BenchmarkRouterListenersAndRoutes generates and marshals the listeners
// and routes of a router that 500 Gateways select, each with an HTTP
// server and a terminated HTTPS server of its own host: one plaintext
// chain and 500 TLS chains, 501 routes.
func BenchmarkRouterListenersAndRoutes(b *testing.B) {
	base := modeltest.Load(b, ingressManifests)
	var gws []*model.Gateway
	for i := range 500 {
		host := fmt.Sprintf("h%d.example.com", i)
		gws = append(gws, gateway("istio-system", fmt.Sprintf("gw-%03d", i), ingressSelector,
			httpServer(80, host), httpsServer(443, "https", simple(fmt.Sprintf("cert-%d", i)), host)))
	}
	snap := withGateways(base, gws...)
	g := &Generator{TrustDomain: td}
	b.ReportAllocs()
	bytes := 0
	for b.Loop() {
		bytes = 0
		for _, typeURL := range []string{resource.ListenerType, resource.RouteType} {
			for _, r := range g.Generate(snap, ingress(), typeURL, nil, true) {
				m, err := r.Message(typeURL)
				if err != nil {
					b.Fatal(err)
				}
				raw, err := proto.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				bytes += len(raw)
			}
		}
	}
	b.ReportMetric(float64(bytes), "bytes/push")
}
