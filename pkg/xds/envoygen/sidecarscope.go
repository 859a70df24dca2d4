package envoygen

import (
	"strings"
	"sync"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
	"github.com/bulwark-mesh/bulwark/pkg/xds/scope"
)

// What a sidecar proxy sees is its Sidecar's view (package scope, which
// proxyless gRPC reads too): the services of its namespace's exports that
// its Sidecar's egress hosts import, the mesh VirtualServices those hosts
// import and the services they route to. Without a Sidecar, every
// service exported to the namespace and every mesh VirtualService it
// sees. DestinationRules reach the proxy through the services it sees.
//
// Routers (gateways) are configured by no Sidecar, as in Istio.

// egressScope is one proxy's view; proxies of one namespace configured by
// one Sidecar share it within a snapshot.
type egressScope struct {
	sidecar  *model.Sidecar
	key      string           // sidecar.Key(); "" without one
	services []*model.Service // sorted by hostname
	byHost   map[string]*model.Service
	// listed are the services its egress hosts name (scope.View's
	// Listed).
	listed []*model.Service
	// vs are the mesh VirtualServices imported, by name; nil imports all.
	// vss are the same in Istio's order (scope.View's VirtualServices).
	vs  map[model.Meta]bool
	vss []*model.VirtualService
	// mesh indexes vss, once asked for (meshVirtualServices).
	meshOnce sync.Once
	mesh     *meshVS
	// listeners are the egress listeners' own views, when the Sidecar
	// has several (scope.View's Listeners), with what routes read of them.
	listeners []*listenerView
}

// listenerView is what one egress listener imports.
type listenerView struct {
	port     uint32 // 0: the catch-all
	byPort   map[uint32][]*model.Service
	vs       map[model.Meta]bool
	meshOnce sync.Once
	mesh     *meshVS
}

// routeListener is the egress listener whose services and VirtualServices
// route "<port>" reads: the first of that port, else the catch-all; nil
// when the Sidecar has one listener (or none), whose view is the scope's.
func (sc *egressScope) routeListener(port uint32) *listenerView {
	for _, l := range sc.listeners {
		if l.port == 0 || l.port == port {
			return l
		}
	}
	return nil
}

// egress returns b's proxy's view, computed once per builder and, kept
// by the snapshot (model.SharedValue), once per snapshot, Sidecar and
// namespace.
func (b *builder) egress() *egressScope {
	b.egressOnce.Do(func() {
		var sc *model.Sidecar
		if !b.p.Router {
			sc = b.snap.SidecarFor(b.p.Namespace, b.p.Labels)
		}
		if sc == nil {
			svcs := b.snap.ServicesVisibleTo(b.p.Namespace)
			b.scope = &egressScope{services: svcs, listed: svcs}
			return
		}
		b.scope = sharedEgressScope(b.snap, sc, b.p.Namespace, b.g.Mesh.Routes)
	})
	return b.scope
}

// egressKey names an egressScope among the values its snapshot shares:
// as scope.Shared's key, of this package's own type.
type egressKey struct {
	sidecar      *model.Sidecar
	ns, exportTo string
}

// sharedEgressScope is the view of the proxies of namespace ns that sc
// (one of snap's Sidecars) configures, built once per snapshot from the
// scope.View proxyless clients share.
func sharedEgressScope(snap *model.Snapshot, sc *model.Sidecar, ns string, o routes.Options) *egressScope {
	k := egressKey{sidecar: sc, ns: ns, exportTo: strings.Join(o.DefaultExportTo, ",")}
	return model.SharedValue(snap, k, func() *egressScope {
		v := scope.Shared(snap, sc, ns, o)
		out := &egressScope{sidecar: sc, key: sc.Key(), services: v.Services, byHost: v.ByHost, listed: v.Listed, vs: v.VS, vss: v.VirtualServices}
		for _, l := range v.Listeners {
			out.listeners = append(out.listeners, &listenerView{port: l.Port, byPort: l.ByPort, vs: l.VS})
		}
		return out
	})
}

// sidecarKey is the key of the Sidecar configuring b's proxy: "" for none.
func (b *builder) sidecarKey() string { return b.egress().key }

// service returns the service of hostname the proxy sees, nil if none.
func (b *builder) service(hostname string) *model.Service {
	sc := b.egress()
	if sc.byHost == nil {
		return b.snap.VisibleService(hostname, b.p.Namespace)
	}
	return sc.byHost[hostname]
}

// registryOnly reports whether what is not in the proxy's view goes to
// BlackHoleCluster: its Sidecar's outboundTrafficPolicy, else the mesh's.
func (b *builder) registryOnly() bool {
	if only, set := b.egress().sidecar.RegistryOnly(); set {
		return only
	}
	return b.g.Mesh.RegistryOnly
}
