package routes

import (
	"slices"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
)

// TestBindsToIsGatewaysOf: bindsTo answers what gatewaysOf's list says,
// for every form of reference and every gateway name they may resolve to.
func TestBindsToIsGatewaysOf(t *testing.T) {
	refs := []string{"mesh", "gw", "./gw", "ns/gw", "other/gw", "*/gw", "gw.ns.svc.cluster.local", "gw.other", "gw.", ".gw", "/", "ns/", "/gw", "", "a/b/c", "mesh/x"}
	gateways := []string{"mesh", "ns/gw", "other/gw", "ns/", "/gw", "/", "ns/gw.ns.svc.cluster.local", "*/gw", "a/b/c", "ns/mesh"}
	for _, a := range refs {
		for _, b := range append([]string{""}, refs...) {
			spec := &networkingv1.VirtualService{}
			for _, r := range []string{a, b} {
				if r != "" || b == "" && a == "" {
					spec.Gateways = append(spec.Gateways, r)
				}
			}
			vs := vsOf("vs", "ns", spec)
			for _, g := range gateways {
				if want, got := slices.Contains(gatewaysOf(vs), g), bindsTo(vs, g); want != got {
					t.Errorf("gateways %q, gateway %q: bindsTo %v, gatewaysOf %v", spec.Gateways, g, got, want)
				}
			}
		}
	}
	if !bindsTo(vsOf("vs", "ns", &networkingv1.VirtualService{}), Mesh) {
		t.Error("a VirtualService naming no gateway is not bound to mesh")
	}
}
