package interop

import (
	"strings"
	"testing"

	"istio.io/istio/pkg/config/schema/collections"

	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// reportedGroup says whether group is one whose kinds Istio reads and
// pkg/policy lists: Istio's own, the Gateway API's (standard and
// experimental), its Inference Extension's, and Kubernetes' Ingress API
// (Istio's istiod is an ingress controller too). The multi-cluster services
// API, which Istio reads too, is not among them.
func reportedGroup(group string) bool {
	switch group {
	case "gateway.networking.k8s.io", "gateway.networking.x-k8s.io", "inference.networking.k8s.io", "networking.k8s.io":
		return true
	}
	return strings.HasSuffix(group, ".istio.io")
}

// TestPolicyKindsAreTheKindsIstioReads: pkg/policy's list of kinds (which
// the reporter watches, the webhook warns about and the README's table
// follows) holds every kind of Istio's schema collections in those groups,
// with Istio's resource name and scope, and no other.
func TestPolicyKindsAreTheKindsIstioReads(t *testing.T) {
	istio := map[string]bool{}
	for _, s := range collections.All.All() {
		if !reportedGroup(s.Group()) {
			continue
		}
		istio[s.Kind()+"."+s.Group()] = true
		k, ok := policy.Lookup(s.Group(), s.Kind())
		if !ok {
			t.Errorf("Istio reads %s.%s (%s), which pkg/policy does not list", s.Kind(), s.Group(), s.Plural())
			continue
		}
		if k.Resource != s.Plural() || k.Namespaced == s.IsClusterScoped() {
			t.Errorf("%s: resource %s, namespaced %t; Istio's %s, cluster-scoped %t", k, k.Resource, k.Namespaced, s.Plural(), s.IsClusterScoped())
		}
	}
	for _, k := range policy.Kinds() {
		if !istio[k.String()] {
			t.Errorf("pkg/policy lists %s, which Istio's schema collections do not hold", k)
		}
	}
}
