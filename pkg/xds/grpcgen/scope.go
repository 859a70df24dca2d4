package grpcgen

import (
	"fmt"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/scope"
)

// Sidecar scoping, as Istio's proxyless generator reads the client's
// SidecarScope: the Sidecar that selects the client (model's SidecarFor:
// workloadSelector, namespace-wide, the root namespace's default) decides
// which services it sees (package scope, the view Envoy sidecars read
// too). What it hides is answered as Istio answers it:
//   - a listener "<host>:<port>", a cluster and its load assignment of a
//     service or port it does not see are absent (Istio builds listeners
//     from SidecarScope.Services() and clusters from the services it
//     indexes by hostname);
//   - the route configuration of a service it sees only because an
//     imported VirtualService routes to it, which no egress listener of
//     the port names, has no virtual host, as Istio's (whose proxyless
//     routes read the egress listener's services); a VirtualService
//     claims a service's route only when the port's egress listener
//     imports it.
//
// Of a Sidecar, proxyless clients do not honour what Istio's proxyless
// generator does not read either (UnsupportedInSidecar).

// clientView is what the client sees: the View of its Sidecar, nil
// without one (every service exported to its namespace).
type clientView struct {
	snap *model.Snapshot
	ns   string
	v    *scope.View // nil: no Sidecar
}

// view returns p's view in snap, shared by the clients of one Sidecar and
// namespace within a snapshot.
func (g *Generator) view(snap *model.Snapshot, p *Proxy) clientView {
	cv := clientView{snap: snap, ns: p.Namespace}
	sc := snap.SidecarFor(p.Namespace, p.Labels)
	if sc == nil {
		return cv
	}
	cv.v = scope.Shared(snap, sc, p.Namespace, g.Routes)
	return cv
}

// service returns the service of hostname the client sees (with the ports
// it sees), nil if none.
func (cv clientView) service(hostname string) *model.Service {
	if cv.v == nil {
		return cv.snap.VisibleService(hostname, cv.ns)
	}
	return cv.v.ByHost[hostname]
}

// services are the services the client sees, sorted by hostname.
func (cv clientView) services() []*model.Service {
	if cv.v == nil {
		return cv.snap.ServicesVisibleTo(cv.ns)
	}
	return cv.v.Services
}

// routed reports whether the routes of port have a virtual host for the
// service of hostname.
func (cv clientView) routed(hostname string, port uint32) bool {
	return cv.v == nil || cv.v.ListedOn(hostname, port)
}

// appliesOn reports whether the client applies the mesh VirtualService vs
// (one its namespace sees) to the routes of port.
func (cv clientView) appliesOn(vs *model.VirtualService, port uint32) bool {
	return cv.v == nil || cv.v.ImportsVirtualServiceOn(vs, port)
}

// key is the Sidecar's part of the key of a resource whose content the
// Sidecar decides: "" without one.
func (cv clientView) key() string {
	if cv.v == nil {
		return ""
	}
	return "|sidecar|" + cv.v.Key
}

// ScopeKey is what of the client's scope, besides its namespace and
// labels, decides its resources in snap: the Sidecar that selects it,
// content and all ("" for none). A client whose Sidecar changed is
// answered in full.
func ScopeKey(snap *model.Snapshot, p *Proxy) string {
	return snap.SidecarFor(p.Namespace, p.Labels).Key()
}

// UnsupportedInSidecar lists what of sc proxyless gRPC clients do not
// honour, by field path: the fields the unsupported-configuration
// reporter names for gRPC workloads. Their egress is scoped as Envoy
// sidecars' is; the rest, as in Istio's proxyless generator, is not read.
func UnsupportedInSidecar(sc *model.Sidecar) []string {
	spec := sc.GetSpec()
	var out []string
	for i := range spec.GetIngress() {
		out = append(out, fmt.Sprintf("spec.ingress[%d]: not read by proxyless gRPC; a gRPC server's listener is the address it serves, with its PeerAuthentication and AuthorizationPolicies", i))
	}
	if spec.GetInboundConnectionPool() != nil {
		out = append(out, "spec.inboundConnectionPool: not read by proxyless gRPC")
	}
	if p := spec.GetOutboundTrafficPolicy(); p != nil && (!registryOnly(sc) || p.GetEgressProxy() != nil) {
		out = append(out, "spec.outboundTrafficPolicy: proxyless gRPC clients reach only the services they see (REGISTRY_ONLY); nothing passes through")
	}
	return out
}

func registryOnly(sc *model.Sidecar) bool {
	only, _ := sc.RegistryOnly()
	return only
}
