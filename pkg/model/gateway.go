package model

import (
	"cmp"
	"slices"
	"time"
)

// Gateways returns the snapshot's Gateways, sorted by namespace and name.
func (s *Snapshot) Gateways() []*Gateway { return s.res.Gateways }

// VirtualServices returns the snapshot's VirtualServices, sorted by
// namespace and name.
func (s *Snapshot) VirtualServices() []*VirtualService { return s.res.VirtualServices }

// GatewaysFor returns the Gateways that configure the gateway pod of
// podNamespace with podLabels, as Istio selects them: a Gateway of any
// namespace whose selector is a subset of the pod's labels; a Gateway
// without a selector, or with an empty one, selects every gateway pod.
// With scopeToNamespace (Istio's PILOT_SCOPE_GATEWAY_TO_NAMESPACE) only
// the Gateways of the pod's own namespace are candidates.
//
// They are in Istio's order, the order in which it merges their servers
// (the first of conflicting servers wins): oldest first by creation time,
// then by name, then by namespace.
func (s *Snapshot) GatewaysFor(podNamespace string, podLabels map[string]string, scopeToNamespace bool) []*Gateway {
	var out []*Gateway
	for _, gw := range s.res.Gateways {
		if scopeToNamespace && gw.Namespace != podNamespace {
			continue
		}
		if Matches(gw.Spec.GetSelector(), podLabels) {
			out = append(out, gw)
		}
	}
	slices.SortStableFunc(out, CompareGateways)
	return out
}

// CompareGateways orders Gateways as Istio orders configurations of one
// kind: by creation time, then name, then namespace.
func CompareGateways(a, b *Gateway) int { return compareCreated(a.Meta, a.Created, b.Meta, b.Created) }

// CompareVirtualServices orders VirtualServices as CompareGateways orders
// Gateways, as Istio orders them before merging their routes.
func CompareVirtualServices(a, b *VirtualService) int {
	return compareCreated(a.Meta, a.Created, b.Meta, b.Created)
}

func compareCreated(am Meta, at time.Time, bm Meta, bt time.Time) int {
	return cmp.Or(at.Compare(bt), cmp.Compare(am.Name, bm.Name), cmp.Compare(am.Namespace, bm.Namespace))
}
