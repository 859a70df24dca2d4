package envoygen

import (
	"slices"
	"strings"
	"sync"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// What a sidecar proxy sees, as Istio's SidecarScope: the services of its
// namespace's exports that its Sidecar's egress hosts import, each with
// only the ports its egress listeners import; the mesh VirtualServices
// those hosts import, by the VirtualService's namespace; and the services
// those VirtualServices route to. Without a Sidecar, every service
// exported to the namespace and every mesh VirtualService it sees.
// DestinationRules reach the proxy through the services it sees.
//
// Routers (gateways) are configured by no Sidecar, as in Istio.

// egressScope is one proxy's view; proxies of one namespace configured by
// one Sidecar share it within a snapshot.
type egressScope struct {
	sidecar  *model.Sidecar
	key      string           // sidecar.Key(); "" without one
	services []*model.Service // sorted by hostname
	byHost   map[string]*model.Service
	// listed are the services its egress hosts name, sorted by hostname:
	// those it has listeners and virtual hosts for. The services its
	// VirtualServices route to besides have clusters alone, as in Istio,
	// whose listeners and routes read the egress listener's services and
	// its clusters the scope's.
	listed []*model.Service
	// vs are the mesh VirtualServices imported, by name; nil imports all.
	vs map[model.Meta]bool
	// listeners are the egress listeners' own views, when the Sidecar
	// has several: a port's route reads the listener of that port, else
	// the catch-all (Istio's GetEgressListenerForRDS).
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

// egress returns b's proxy's view, computed once per builder and, through
// the generator's memo, once per snapshot, Sidecar and namespace.
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
		key := sc.Key()
		b.scope = b.g.scopes.get(b.snap, key+"|"+b.p.Namespace, func() *egressScope { return b.buildEgressScope(sc, key) })
	})
	return b.scope
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

// importsVirtualService reports whether the proxy applies the mesh
// VirtualService vs.
func (sc *egressScope) importsVirtualService(vs *model.VirtualService) bool {
	return sc.vs == nil || sc.vs[vs.Meta]
}

// registryOnly reports whether what is not in the proxy's view goes to
// BlackHoleCluster: its Sidecar's outboundTrafficPolicy, else the mesh's.
func (b *builder) registryOnly() bool {
	if only, set := b.egress().sidecar.RegistryOnly(); set {
		return only
	}
	return b.g.Mesh.RegistryOnly
}

func (b *builder) buildEgressScope(sc *model.Sidecar, key string) *egressScope {
	ns := b.p.Namespace
	visible := b.snap.ServicesVisibleTo(ns)
	var vss []*model.VirtualService
	if len(b.snap.Resources().VirtualServices) > 0 {
		vss, _ = b.g.Mesh.Routes.MeshVirtualServices(b.snap, ns)
	}
	out := &egressScope{sidecar: sc, key: key, byHost: map[string]*model.Service{}, vs: map[model.Meta]bool{}}
	listed := map[string]*model.Service{}
	merge := func(into map[string]*model.Service, s *model.Service) {
		if s == nil {
			return
		}
		prev, ok := into[s.Hostname]
		switch {
		case !ok:
			into[s.Hostname] = s
		case prev != s:
			into[s.Hostname] = mergePorts(b.snap.Service(s.Hostname), prev, s)
		}
	}
	add := func(s *model.Service) { merge(out.byHost, s) }
	egress := sc.EgressListeners()
	for _, l := range egress {
		var view *listenerView
		if len(egress) > 1 && (l.GetPort() == nil || l.GetPort().GetNumber() != 0) {
			view = &listenerView{port: l.GetPort().GetNumber(), byPort: map[uint32][]*model.Service{}, vs: map[model.Meta]bool{}}
			out.listeners = append(out.listeners, view)
		}
		hosts := model.ParseEgressHosts(l.GetHosts(), ns)
		port := uint32(0)
		if l.GetPort().GetNumber() != 0 && !strings.EqualFold(l.GetPort().GetProtocol(), "HTTP_PROXY") {
			port = l.GetPort().GetNumber()
		}
		for _, svc := range visible {
			if hosts.ImportsService(svc) {
				s := withPorts(svc, port, nil)
				add(s)
				merge(listed, s)
				if view != nil && s != nil {
					for _, p := range s.Ports {
						view.byPort[p.Port] = append(view.byPort[p.Port], s)
					}
				}
			}
		}
		// The services the listener's VirtualServices route to, as
		// Istio infers them, after those it names.
		for _, vs := range vss {
			if !hosts.ImportsVirtualService(vs.Namespace, routes.Hosts(b.snap, vs)) {
				continue
			}
			out.vs[vs.Meta] = true
			if view != nil {
				view.vs[vs.Meta] = true
			}
			for _, d := range vsDestinations(b.snap, vs, ns) {
				svc := b.snap.Service(d.host)
				if svc == nil || (svc.Namespace != ns && !b.snap.ServiceVisible(svc, ns)) {
					continue
				}
				add(withPorts(svc, port, d.ports))
			}
		}
	}
	out.services, out.listed = sortedServices(out.byHost), sortedServices(listed)
	return out
}

// withPorts is svc with only port (when not 0), else with only the ports
// of vsPorts (when it names any, and not 0, "every port"): svc itself when
// that is all of its ports, a copy otherwise, nil when none.
func withPorts(svc *model.Service, port uint32, vsPorts map[uint32]bool) *model.Service {
	keep := func(p model.Port) bool { return p.Port == port }
	if port == 0 {
		if len(vsPorts) == 0 || vsPorts[0] {
			return svc
		}
		keep = func(p model.Port) bool { return vsPorts[p.Port] }
	}
	var ports []model.Port
	for _, p := range svc.Ports {
		if keep(p) {
			ports = append(ports, p)
		}
	}
	switch len(ports) {
	case 0:
		return nil
	case len(svc.Ports):
		return svc
	}
	c := *svc
	c.Ports = ports
	return &c
}

// mergePorts is a and b, two views of full (a service) with some of its
// ports each, with the ports of both, in full's order: full itself when
// that is all of them.
func mergePorts(full, a, b *model.Service) *model.Service {
	if full == nil {
		return a
	}
	has := func(s *model.Service, n uint32) bool {
		return slices.ContainsFunc(s.Ports, func(p model.Port) bool { return p.Port == n })
	}
	var ports []model.Port
	for _, p := range full.Ports {
		if has(a, p.Port) || has(b, p.Port) {
			ports = append(ports, p)
		}
	}
	if len(ports) == len(full.Ports) {
		return full
	}
	c := *full
	c.Ports = ports
	return &c
}

// vsDestination is a host a VirtualService routes to and the ports it
// names (0: a destination without a port, every port).
type vsDestination struct {
	host  string
	ports map[uint32]bool
}

// vsDestinations are the hosts vs routes, mirrors and forwards to for a
// proxy of namespace ns (http rules whose sourceNamespace matches name
// another namespace are skipped), as Istio's
// virtualServiceDestinationsFilteredBySourceNamespace, in vs's order.
func vsDestinations(snap *model.Snapshot, vs *model.VirtualService, ns string) []vsDestination {
	var out []vsDestination
	at := map[string]int{}
	add := func(d *networkingv1.Destination) {
		if d == nil {
			return
		}
		h := routes.ResolveHost(snap, d.GetHost(), vs.Namespace)
		i, ok := at[h]
		if !ok {
			i = len(out)
			at[h] = i
			out = append(out, vsDestination{host: h, ports: map[uint32]bool{}})
		}
		out[i].ports[d.GetPort().GetNumber()] = true
	}
	routes.EachDestination(vs, func(r *networkingv1.HTTPRoute) bool {
		matched := true
		for _, m := range r.GetMatch() {
			if src := m.GetSourceNamespace(); src != "" {
				if src == ns {
					return true
				}
				matched = false
			}
		}
		return matched
	}, add)
	return out
}

// egressMemo keeps the sidecar scopes of the last snapshots, by snapshot
// and key (Sidecar and namespace): the proxies of one namespace and
// Sidecar compute their view once per snapshot. The zero value is ready.
type egressMemo struct {
	mu    sync.Mutex
	snaps []*model.Snapshot // oldest first
	built map[*model.Snapshot]map[string]*memoScope
}

type memoScope struct {
	once sync.Once
	sc   *egressScope
}

// get returns the scope of key in snap, built by build once while snap is
// among the last memoSnapshots asked for. What it returns is shared.
func (m *egressMemo) get(snap *model.Snapshot, key string, build func() *egressScope) *egressScope {
	m.mu.Lock()
	byKey, ok := m.built[snap]
	if !ok {
		if m.built == nil {
			m.built = map[*model.Snapshot]map[string]*memoScope{}
		}
		byKey = map[string]*memoScope{}
		m.built[snap] = byKey
		m.snaps = append(m.snaps, snap)
		if len(m.snaps) > memoSnapshots {
			delete(m.built, m.snaps[0])
			m.snaps = m.snaps[1:]
		}
	}
	e, ok := byKey[key]
	if !ok {
		e = &memoScope{}
		byKey[key] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.sc = build() })
	return e.sc
}

func sortedServices(byHost map[string]*model.Service) []*model.Service {
	out := make([]*model.Service, 0, len(byHost))
	for _, s := range byHost {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, c *model.Service) int { return strings.Compare(a.Hostname, c.Hostname) })
	return out
}
