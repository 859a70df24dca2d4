package xds

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// failingClosed are policies each part of which Bulwark refuses, failing
// closed: a CUSTOM AuthorizationPolicy (denies everything), an ALLOW rule
// with a condition it cannot express (dropped), a RequestAuthentication
// whose key set would come over plain http from loopback (its tokens
// refused), a MUTUAL DestinationRule without a client certificate (no
// endpoints), a ServiceEntry for a Kubernetes service's hostname (not
// served) and a Telemetry whose filter is not CEL (applied to none).
const failingClosed = `---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: app}
spec: {action: CUSTOM, provider: {name: ext}, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: app}
spec:
  rules: [{when: [{key: request.experimental.unknown, values: [a]}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  jwtRules: [{issuer: "https://idp.example", jwksUri: "http://127.0.0.1:1/keys"}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo.app.svc.cluster.local
  trafficPolicy: {tls: {mode: MUTUAL}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo-too, namespace: app}
spec:
  hosts: [echo.app.svc.cluster.local]
  resolution: STATIC
  ports: [{name: http, number: 80, protocol: HTTP}]
  endpoints: [{address: 10.5.0.1}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: logs, namespace: app}
spec:
  accessLogging: [{filter: {expression: "response.code >="}}]
`

// TestPoliciesFailingClosedAreCounted: bulwark_policy_fail_closed says,
// by kind and reason, how many parts of the model's policies fail closed,
// and drops back when they are gone.
func TestPoliciesFailingClosedAreCounted(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests+failingClosed), nil)
	gauge := func(kind, reason string) float64 {
		return testutil.ToFloat64(h.srv.metrics.failClosed.WithLabelValues(kind, reason))
	}
	want := map[[2]string]float64{
		{"AuthorizationPolicy", "denies_all"}:         1,
		{"AuthorizationPolicy", "allow_rule_dropped"}: 1,
		{"RequestAuthentication", "tokens_refused"}:   1,
		{"DestinationRule", "tls_refused"}:            1,
		{"ServiceEntry", "host_taken"}:                1,
		{"Telemetry", "refused"}:                      1,
	}
	waitFor(t, "the policies failing closed counted", func() bool {
		return testutil.CollectAndCount(h.srv.metrics.failClosed) == len(want)
	})
	for k, v := range want {
		if got := gauge(k[0], k[1]); got != v {
			t.Errorf("bulwark_policy_fail_closed{kind=%q,reason=%q} = %v, want %v", k[0], k[1], got, v)
		}
	}
	h.store.Publish(modeltest.Load(t, envoyManifests))
	waitFor(t, "the gauge emptied once the policies are gone", func() bool {
		return testutil.CollectAndCount(h.srv.metrics.failClosed) == 0
	})
}
