package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protojson"
	telemetryapi "istio.io/api/telemetry/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	istiotelemetry "istio.io/client-go/pkg/apis/telemetry/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
	"github.com/bulwark-mesh/bulwark/pkg/unsupported/unsupportedtest"
)

// telemetryCRD installs the Telemetry CRD, which the chart leaves to
// Istio's base chart, serving v1 and v1alpha1.
func telemetryCRD(t *testing.T, env *testenv.Env) {
	t.Helper()
	k, ok := policy.Lookup("telemetry.istio.io", "Telemetry")
	if !ok {
		t.Fatal("no Telemetry kind")
	}
	env.InstallCRDs(t, unsupportedtest.WriteFile(t, unsupportedtest.CRD(k, "v1", "v1alpha1")))
}

// changeEnvoyTelemetry creates, through the API, a Telemetry selecting w
// with an access log filtered by a CEL expression, waits for the stand-in
// to hold (and ACK) it on every virtualInbound chain that carries a
// connection manager or tcp_proxy, then deletes it and waits for the
// access logs to go.
func changeEnvoyTelemetry(t *testing.T, env *testenv.Env, a *envoyAgent, w workload) {
	telemetries := istioClient(t, env).TelemetryV1().Telemetries(w.Namespace)
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	const expr = "response.code >= 500"
	tel := &istiotelemetry.Telemetry{ObjectMeta: metav1.ObjectMeta{Name: "echo-logs", Namespace: w.Namespace}}
	tel.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": w.Labels["app"]}}
	tel.Spec.AccessLogging = []*telemetryapi.AccessLogging{{
		Providers: []*telemetryapi.ProviderRef{{Name: "envoy"}},
		Filter:    &telemetryapi.AccessLogging_Filter{Expression: expr},
	}}
	created := time.Now()
	if _, err := telemetries.Create(ctx, tel, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Telemetry: %v", err)
	}
	logged := func(st *standinState) (int, string) {
		held, ok := st.Resources["LDS"]["virtualInbound"]
		if !ok {
			return 0, "no virtualInbound listener"
		}
		var l listenerv3.Listener
		if err := protojson.Unmarshal(held.Resource, &l); err != nil {
			return 0, err.Error()
		}
		// JSON escapes the expression's ">".
		return strings.Count(string(held.Resource), strings.Split(expr, " ")[0]), ""
	}
	st := a.waitState(t, envoyWait, func(st *standinState) string {
		if p := ldsProblem(st); p != "" {
			return p
		}
		n, p := logged(st)
		if p != "" {
			return p
		}
		if n == 0 {
			held := string(st.Resources["LDS"]["virtualInbound"].Resource)
			return fmt.Sprintf("virtualInbound has no access log with the Telemetry's filter (%d access logs, %d CEL filters)",
				strings.Count(held, "accessLog"), strings.Count(held, "ExpressionFilter"))
		}
		return ""
	})
	n, _ := logged(st)
	t.Logf("the Telemetry's filtered access log on %d places of virtualInbound %v after the create", n, time.Since(created).Round(time.Millisecond))

	if err := telemetries.Delete(ctx, tel.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Telemetry: %v", err)
	}
	a.waitState(t, envoyWait, func(st *standinState) string {
		if p := ldsProblem(st); p != "" {
			return p
		}
		if n, p := logged(st); p != "" || n > 0 {
			return fmt.Sprintf("virtualInbound still logs with the filter (%d) %s", n, p)
		}
		return ""
	})
}
