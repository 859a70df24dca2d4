package routes

import (
	"slices"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// What a VirtualService reaches, for telling which proxies and resources
// its change may change (the generators' readers): the bindings and
// exportTo that decide who sees it, the delegations that make it part of
// another, the hosts it routes to.

// BoundToMesh reports whether vs is bound to sidecars: it names no
// gateways, or "mesh" among them.
func BoundToMesh(vs *model.VirtualService) bool {
	return vs.Spec != nil && slices.Contains(gatewaysOf(vs), Mesh)
}

// Gateways are vs's bindings, each "ns/name" or "mesh": "mesh" alone when
// it names none.
func Gateways(vs *model.VirtualService) []string { return gatewaysOf(vs) }

// SeenFrom reports whether vs's exportTo (else the mesh's
// defaultVirtualServiceExportTo) lets proxies of namespace ns see it.
func (o Options) SeenFrom(vs *model.VirtualService, ns string) bool {
	return vs.Spec != nil && visibility(vs, ns, o.DefaultExportTo) > 0
}

// Delegates reports whether one of root's http rules delegates to d.
func Delegates(root, d *model.VirtualService) bool {
	for _, r := range root.Spec.GetHttp() {
		del := r.GetDelegate()
		if del == nil {
			continue
		}
		ns := del.GetNamespace()
		if ns == "" {
			ns = root.Namespace
		}
		if ns == d.Namespace && del.GetName() == d.Name {
			return true
		}
	}
	return false
}

// DestinationHosts calls add with each host vs routes, mirrors or
// forwards to, whatever the rule's matches, resolved in vs's namespace.
func DestinationHosts(snap *model.Snapshot, vs *model.VirtualService, add func(host string)) {
	EachDestination(vs, nil, func(d *networkingv1.Destination) {
		if d.GetHost() != "" {
			add(ResolveHost(snap, d.GetHost(), vs.Namespace))
		}
	})
}

// EachDestination calls fn with each destination of vs's routes and
// mirrors, http rules first (those keepHTTP keeps; all when nil), then
// tcp, then tls, in vs's order.
func EachDestination(vs *model.VirtualService, keepHTTP func(*networkingv1.HTTPRoute) bool, fn func(*networkingv1.Destination)) {
	dst := func(d *networkingv1.Destination) {
		if d != nil {
			fn(d)
		}
	}
	for _, r := range vs.Spec.GetHttp() {
		if keepHTTP != nil && !keepHTTP(r) {
			continue
		}
		for _, d := range r.GetRoute() {
			dst(d.GetDestination())
		}
		dst(r.GetMirror())
		for _, m := range r.GetMirrors() {
			dst(m.GetDestination())
		}
	}
	for _, r := range vs.Spec.GetTcp() {
		for _, d := range r.GetRoute() {
			dst(d.GetDestination())
		}
	}
	for _, r := range vs.Spec.GetTls() {
		for _, d := range r.GetRoute() {
			dst(d.GetDestination())
		}
	}
}
