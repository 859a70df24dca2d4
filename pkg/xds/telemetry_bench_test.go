package xds

import (
	"fmt"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// benchTelemetries are a mesh-wide access log, a namespace's tag
// override and a workload's access log filter: every sidecar of the
// bench model gets a Telemetry scope, svc-0's its own.
const benchTelemetries = `
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh, namespace: istio-system}
spec: {accessLogging: [{providers: [{name: envoy}]}]}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: ns, namespace: bench}
spec: {metrics: [{overrides: [{match: {metric: REQUEST_COUNT}, tagOverrides: {request_host: {value: request.host}}}]}]}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: svc-0, namespace: bench}
spec:
  selector: {matchLabels: {app: svc-0}}
  accessLogging: [{providers: [{name: envoy}], filter: {expression: "response.code >= 500"}}]
`

// BenchmarkSidecarPushWithTelemetries is BenchmarkSidecarPush with
// Telemetries selecting every sidecar: what the Telemetry API costs a
// push beyond mesh config's telemetry.
func BenchmarkSidecarPushWithTelemetries(b *testing.B) {
	for _, n := range []int{100, 1000} {
		base := sidecarBenchModel(b, n)
		res := *base.Resources()
		res.Telemetries = modeltest.Load(b, benchTelemetries).Resources().Telemetries
		snap := model.BuildShared(fmt.Sprintf("bench-tel-%d", n), model.Options{}, res, nil)
		srv, err := New(Config{Model: model.NewStore(), Authenticator: headerAuth{}, TrustDomain: testTD})
		if err != nil {
			b.Fatal(err)
		}
		first := benchWorkload(b, "svc-0-0", "10.1.0.1")
		b.Run(fmt.Sprintf("first/services=%d", n), func(b *testing.B) {
			for range b.N {
				pushAllTypes(b, srv, newPushState(snap, time.Time{}), first)
			}
		})
		b.Run(fmt.Sprintf("second/services=%d", n), func(b *testing.B) {
			st := newPushState(snap, time.Time{})
			pushAllTypes(b, srv, st, first)
			b.ResetTimer()
			for i := range b.N {
				pushAllTypes(b, srv, st, benchWorkload(b, fmt.Sprintf("svc-0-r%d", i), fmt.Sprintf("10.3.%d.%d", i/250%250, i%250+1)))
			}
		})
	}
}
