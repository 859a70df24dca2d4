package xds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// BenchmarkSidecarPushWithTCPRoutes is BenchmarkSidecarPush's first push
// for 1,000 services of which 100 have a mesh VirtualService splitting
// their TCP port 90/10 between themselves and the next service: what the
// tls and tcp routes of VirtualServices cost a sidecar's listeners.
func BenchmarkSidecarPushWithTCPRoutes(b *testing.B) {
	const n, routed = 1000, 100
	base := sidecarBenchModel(b, n)
	var y strings.Builder
	for i := range routed {
		fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs-%d, namespace: bench}\nspec:\n"+
			"  hosts: [svc-%d]\n  tcp:\n  - route:\n    - {destination: {host: svc-%d, port: {number: 9000}}, weight: 90}\n"+
			"    - {destination: {host: svc-%d, port: {number: 9000}}, weight: 10}\n", i, i, i, i+1)
	}
	res := *base.Resources()
	res.VirtualServices = modeltest.Load(b, y.String()).Resources().VirtualServices
	snap := model.Build("bench-tcp-routes", model.Options{}, res)
	srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
	if err != nil {
		b.Fatal(err)
	}
	first := benchWorkload(b, "svc-0-0", "10.1.0.1")
	for name, s := range map[string]*model.Snapshot{"without": base, "with": snap} {
		b.Run(fmt.Sprintf("services=%d/vs=%s", n, name), func(b *testing.B) {
			for range b.N {
				pushAllTypes(b, srv, newPushState(s, time.Time{}), first)
			}
		})
	}
}
