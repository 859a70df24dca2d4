package xds

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

func TestOriginationProblemsNameEachRefusedSetting(t *testing.T) {
	insecure := &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_SIMPLE, InsecureSkipVerify: wrapperspb.Bool(true)}
	dr := &model.DestinationRule{Spec: &networkingv1.DestinationRule{
		Host: "echo",
		TrafficPolicy: &networkingv1.TrafficPolicy{
			Tls: &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_SIMPLE, CaCertificates: "/ca.pem"},
			PortLevelSettings: []*networkingv1.TrafficPolicy_PortTrafficPolicy{{
				Port: &networkingv1.PortSelector{Number: 443},
				Tls:  &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_MUTUAL},
			}},
		},
		Subsets: []*networkingv1.Subset{{Name: "v1", TrafficPolicy: &networkingv1.TrafficPolicy{Tls: insecure}}},
	}}
	dr.Namespace, dr.Name = "app", "echo"

	credential := &model.DestinationRule{Spec: &networkingv1.DestinationRule{
		Host:          "echo",
		TrafficPolicy: &networkingv1.TrafficPolicy{Tls: &networkingv1.ClientTLSSettings{Mode: networkingv1.ClientTLSSettings_SIMPLE, CredentialName: "ca"}},
	}}
	if got := originationProblems(credential, envoygen.Mesh{}); len(got) != 1 || !strings.Contains(got[0], "workloadSelector") {
		t.Errorf("credentialName without a selector: problems %q", got)
	}
	credential.Spec.WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "sleep"}}
	if got := originationProblems(credential, envoygen.Mesh{}); len(got) != 0 {
		t.Errorf("credentialName with a selector: problems %q", got)
	}

	got := originationProblems(dr, envoygen.Mesh{})
	if len(got) != 2 || !strings.Contains(got[0], "port 443: refused") || !strings.Contains(got[1], "subset v1: refused") ||
		!strings.Contains(got[1], "insecureSkipVerify") {
		t.Errorf("problems %q", got)
	}
	got = originationProblems(dr, envoygen.Mesh{AllowInsecureSkipVerify: true})
	if len(got) != 2 || !strings.Contains(got[1], "subset v1: the server is not verified") {
		t.Errorf("problems with insecureSkipVerify allowed %q", got)
	}
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Two rules for one host in one namespace merge as Istio merges them;
// the newer one's traffic policy and its subset of a name already taken
// are not used, which the problem log says, once.
func TestMergedDestinationRulesAreReported(t *testing.T) {
	var logs lockedBuffer
	newHarness(t, modeltest.Load(t, envoyManifests+`
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: a, namespace: app, creationTimestamp: "2026-01-01T00:00:01Z"}
spec: {host: echo, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}, subsets: [{name: v1, labels: {version: v1}}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: b, namespace: app, creationTimestamp: "2026-01-01T00:00:02Z"}
spec: {host: echo.app.svc.cluster.local, trafficPolicy: {tls: {mode: DISABLE}}, subsets: [{name: v1, labels: {version: v2}}, {name: v2}]}
`), func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	waitFor(t, "the merge reported", func() bool {
		return strings.Contains(logs.String(), "app/b subset v1: not used, merged into app/a")
	})
	out := logs.String()
	if strings.Count(out, "app/b trafficPolicy: not used, merged into app/a") != 1 {
		t.Errorf("the unused traffic policy is not reported once:\n%s", out)
	}
	if strings.Contains(out, "subset v2") {
		t.Errorf("a subset that was merged is reported:\n%s", out)
	}
}
