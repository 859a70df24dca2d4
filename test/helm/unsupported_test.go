package helm

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// TestChartCoversTheKindsOfPolicy: the chart follows package policy's
// list of kinds. The ClusterRole lets istiod list and watch every kind it
// reports; every validating webhook is sent every Istio kind, for its
// warnings, and no Gateway API kind, which another implementation must be
// able to write while istiod is down.
func TestChartCoversTheKindsOfPolicy(t *testing.T) {
	r := mustRender(t, Options{})
	cr := only[*rbacv1.ClusterRole](t, r, "ClusterRole")
	for _, k := range policy.Reported() {
		for _, verb := range []string{"list", "watch"} {
			if !allowed(cr.Rules, k.Group, k.Resource, verb, "") {
				t.Errorf("ClusterRole does not allow %s %s", verb, k.CRD())
			}
		}
	}
	for _, w := range validatingWebhook(t, r).Webhooks {
		for _, k := range policy.Kinds() {
			istio := strings.HasSuffix(k.Group, ".istio.io")
			if got := webhookGets(w.Rules, k); got != istio {
				t.Errorf("%s: sent %s: %t, want %t", w.Name, k.CRD(), got, istio)
			}
		}
	}
}

func webhookGets(rules []admissionv1.RuleWithOperations, k policy.Kind) bool {
	return slices.ContainsFunc(rules, func(r admissionv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, k.Group) && slices.Contains(r.Resources, k.Resource) &&
			slices.Contains(r.Operations, admissionv1.Create) && slices.Contains(r.Operations, admissionv1.Update)
	})
}
