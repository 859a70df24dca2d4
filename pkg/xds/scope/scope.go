// Package scope is what a proxy configured by a Sidecar resource sees,
// as Istio's SidecarScope: the services of its namespace's exports that
// the Sidecar's egress hosts import, each with only the ports its egress
// listeners import; the mesh VirtualServices those hosts import, by the
// VirtualService's namespace; and the services those VirtualServices
// route to. Envoy sidecars (envoygen) and proxyless gRPC clients
// (grpcgen) read one View, so the two cannot drift.
//
// Without a Sidecar a proxy sees every service exported to its namespace
// and every mesh VirtualService it sees; that needs no View. Routers
// (gateways) are configured by no Sidecar, as in Istio.
package scope

import (
	"maps"
	"slices"
	"strings"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// View is what the proxies of one namespace configured by one Sidecar
// see within one snapshot. It is not changed once built, and is shared.
type View struct {
	// Sidecar configures the proxies; Key is its Key().
	Sidecar *model.Sidecar
	Key     string
	// Services are every service seen (those the egress hosts import and
	// those the imported VirtualServices route to), sorted by hostname;
	// ByHost the same by hostname.
	Services []*model.Service
	ByHost   map[string]*model.Service
	// Listed are the services the egress hosts name, sorted by hostname:
	// those an Envoy sidecar has listeners and virtual hosts for. The
	// services the VirtualServices route to besides have clusters alone,
	// as in Istio, whose listeners and routes read the egress listener's
	// services and its clusters the scope's.
	Listed []*model.Service
	// VS are the mesh VirtualServices imported, by name; VirtualServices
	// the same in the order of those Build was given (Istio's).
	VS              map[model.Meta]bool
	VirtualServices []*model.VirtualService
	// Listeners are the egress listeners' own views, when the Sidecar has
	// several: a port's route reads the listener of that port, else the
	// catch-all (Istio's GetEgressListenerForRDS).
	Listeners []*Listener
}

// Listener is what one egress listener imports.
type Listener struct {
	Port   uint32 // 0: the catch-all
	ByPort map[uint32][]*model.Service
	VS     map[model.Meta]bool
}

// RouteListener is the index in Listeners of the egress listener whose
// services and VirtualServices route "<port>" reads: the first of that
// port, else the catch-all; -1 when the Sidecar has one listener (or
// none), whose view is the View's.
func (v *View) RouteListener(port uint32) int {
	for i, l := range v.Listeners {
		if l.Port == 0 || l.Port == port {
			return i
		}
	}
	return -1
}

// ImportsVirtualServiceOn reports whether the proxies apply the mesh
// VirtualService vs to the routes of port: it is imported by the egress
// listener route "<port>" reads.
func (v *View) ImportsVirtualServiceOn(vs *model.VirtualService, port uint32) bool {
	if i := v.RouteListener(port); i >= 0 {
		return v.Listeners[i].VS[vs.Meta]
	}
	return v.VS[vs.Meta]
}

// ListedOn reports whether the service of hostname has a virtual host
// on the routes of port: the egress listener route "<port>" reads names
// it (with that port).
func (v *View) ListedOn(hostname string, port uint32) bool {
	has := func(s *model.Service) bool {
		return s.Hostname == hostname && slices.ContainsFunc(s.Ports, func(p model.Port) bool { return p.Port == port })
	}
	if i := v.RouteListener(port); i >= 0 {
		return slices.ContainsFunc(v.Listeners[i].ByPort[port], has)
	}
	i, found := slices.BinarySearchFunc(v.Listed, hostname, func(s *model.Service, h string) int { return strings.Compare(s.Hostname, h) })
	return found && has(v.Listed[i])
}

// Of is the view of the proxies of namespace ns configured by sc in snap,
// the mesh VirtualServices read under o. Of those, only the ones an
// egress listener of sc imports are checked and have their delegations
// expanded (routes.Options' MeshVirtualServicesWhere): the other
// VirtualServices of the mesh cost a look at their hosts.
func Of(snap *model.Snapshot, sc *model.Sidecar, ns string, o routes.Options) *View {
	var vss []*model.VirtualService
	if len(snap.Resources().VirtualServices) > 0 {
		var listeners []model.EgressHosts
		for _, l := range sc.EgressListeners() {
			listeners = append(listeners, model.ParseEgressHosts(l.GetHosts(), ns))
		}
		names := exactNames(sc)
		vss, _ = o.MeshVirtualServicesWhere(snap, ns, func(vs *model.VirtualService) bool {
			if names != nil && !namesAny(snap, names, vs) {
				return false
			}
			return slices.ContainsFunc(listeners, func(h model.EgressHosts) bool { return importsVirtualService(snap, h, vs) })
		})
	}
	return Build(snap, sc, ns, vss)
}

// candidates are the services of ns's view that sc's egress hosts may
// import, by hostname: those of the names they import when none is a
// wildcard (found by name, not by going through the mesh), else every
// service ns sees.
func candidates(snap *model.Snapshot, sc *model.Sidecar, ns string) []*model.Service {
	names := exactNames(sc)
	if names == nil {
		return snap.ServicesVisibleTo(ns)
	}
	out := make([]*model.Service, 0, len(names))
	for _, h := range slices.Sorted(maps.Keys(names)) {
		if svc := snap.VisibleService(h, ns); svc != nil {
			out = append(out, svc)
		}
	}
	return out
}

// exactNames are the host names sc's egress hosts import, whatever
// their namespace, when none is a wildcard; nil when one is. A
// VirtualService none of whose hosts is one of them or a wildcard is
// then imported by no egress listener: one look at its hosts rules it
// out.
func exactNames(sc *model.Sidecar) map[string]bool {
	names := map[string]bool{}
	for _, l := range sc.EgressListeners() {
		for _, h := range l.GetHosts() {
			ns, name, ok := strings.Cut(h, "/")
			if !ok || strings.HasPrefix(ns, "~") {
				continue // ignored, or excluding only
			}
			if model.Wildcard(name) {
				return nil
			}
			names[name] = true
		}
	}
	return names
}

// namesAny reports whether a host of vs, resolved as a sidecar matches
// it, is a wildcard or one of names.
func namesAny(snap *model.Snapshot, names map[string]bool, vs *model.VirtualService) bool {
	for _, h := range vs.Spec.GetHosts() {
		if r := routes.ResolveHost(snap, h, vs.Namespace); names[r] || routes.Wildcarded(r) {
			return true
		}
	}
	return false
}

// importsVirtualService reports whether hosts import vs: one of its hosts,
// resolved as a sidecar matches it, is imported.
func importsVirtualService(snap *model.Snapshot, hosts model.EgressHosts, vs *model.VirtualService) bool {
	for _, h := range vs.Spec.GetHosts() {
		if hosts.ImportsVirtualService(vs.Namespace, []string{routes.ResolveHost(snap, h, vs.Namespace)}) {
			return true
		}
	}
	return false
}

// Build is the view of the proxies of namespace ns configured by sc in
// snap; vss are the mesh VirtualServices ns sees (routes.Options'
// MeshVirtualServices), or of those at least the ones sc imports (Of).
func Build(snap *model.Snapshot, sc *model.Sidecar, ns string, vss []*model.VirtualService) *View {
	visible := candidates(snap, sc, ns)
	out := &View{Sidecar: sc, Key: sc.Key(), ByHost: map[string]*model.Service{}, VS: map[model.Meta]bool{}}
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
			into[s.Hostname] = mergePorts(snap.Service(s.Hostname), prev, s)
		}
	}
	add := func(s *model.Service) { merge(out.ByHost, s) }
	egress := sc.EgressListeners()
	for _, l := range egress {
		var view *Listener
		if len(egress) > 1 && (l.GetPort() == nil || l.GetPort().GetNumber() != 0) {
			view = &Listener{Port: l.GetPort().GetNumber(), ByPort: map[uint32][]*model.Service{}, VS: map[model.Meta]bool{}}
			out.Listeners = append(out.Listeners, view)
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
						view.ByPort[p.Port] = append(view.ByPort[p.Port], s)
					}
				}
			}
		}
		// The services the listener's VirtualServices route to, as
		// Istio infers them, after those it names.
		for _, vs := range vss {
			if !importsVirtualService(snap, hosts, vs) {
				continue
			}
			out.VS[vs.Meta] = true
			if view != nil {
				view.VS[vs.Meta] = true
			}
			for _, d := range destinations(snap, vs, ns) {
				svc := snap.Service(d.host)
				if svc == nil || (svc.Namespace != ns && !snap.ServiceVisible(svc, ns)) {
					continue
				}
				if out.ByHost[svc.Hostname] == svc {
					continue // seen with every port already: nothing to add
				}
				add(withPorts(svc, port, d.ports))
			}
		}
	}
	out.Services, out.Listed = sortedServices(out.ByHost), sortedServices(listed)
	for _, vs := range vss {
		if out.VS[vs.Meta] {
			out.VirtualServices = append(out.VirtualServices, vs)
		}
	}
	return out
}

// withPorts is svc with only port (when not 0), else with only the ports
// of vsPorts (when it names any, and not 0, "every port"): svc itself when
// that is all of its ports, a copy otherwise, nil when none.
func withPorts(svc *model.Service, port uint32, vsPorts []uint32) *model.Service {
	keep := func(p model.Port) bool { return p.Port == port }
	if port == 0 {
		if len(vsPorts) == 0 || slices.Contains(vsPorts, 0) {
			return svc
		}
		keep = func(p model.Port) bool { return slices.Contains(vsPorts, p.Port) }
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

// destination is a host a VirtualService routes to and the ports it
// names (0: a destination without a port, every port).
type destination struct {
	host  string
	ports []uint32 // each once
}

// destinations are the hosts vs routes, mirrors and forwards to for a
// proxy of namespace ns (http rules whose sourceNamespace matches name
// another namespace are skipped), as Istio's
// virtualServiceDestinationsFilteredBySourceNamespace, in vs's order.
func destinations(snap *model.Snapshot, vs *model.VirtualService, ns string) []destination {
	var out []destination
	// Most VirtualServices route to a few hosts: found by a look at
	// each, and by a map past destinationsScanned.
	var at map[string]int
	find := func(h string) int {
		if at != nil {
			if i, ok := at[h]; ok {
				return i
			}
			return -1
		}
		for i := range out {
			if out[i].host == h {
				return i
			}
		}
		return -1
	}
	add := func(d *networkingv1.Destination) {
		if d == nil {
			return
		}
		h := routes.ResolveHost(snap, d.GetHost(), vs.Namespace)
		i := find(h)
		if i < 0 {
			i = len(out)
			out = append(out, destination{host: h})
			switch {
			case at != nil:
				at[h] = i
			case len(out) > destinationsScanned:
				at = make(map[string]int, 2*len(out))
				for j, d := range out {
					at[d.host] = j
				}
			}
		}
		if n := d.GetPort().GetNumber(); !slices.Contains(out[i].ports, n) {
			out[i].ports = append(out[i].ports, n)
		}
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

// destinationsScanned is how many hosts destinations looks through
// before it indexes them.
const destinationsScanned = 16

func sortedServices(byHost map[string]*model.Service) []*model.Service {
	out := make([]*model.Service, 0, len(byHost))
	for _, s := range byHost {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, c *model.Service) int { return strings.Compare(a.Hostname, c.Hostname) })
	return out
}

// viewKey names a View among the values its snapshot shares
// (model.SharedValue): the Sidecar (one of the snapshot's), the
// namespace of the proxies it configures, and the mesh's
// defaultVirtualServiceExportTo, the one option of routes.Options a
// View reads.
type viewKey struct {
	sidecar      *model.Sidecar
	ns, exportTo string
}

// Shared is Of(snap, sc, ns, o), built once per snapshot, Sidecar and
// namespace and shared by every proxy (Envoy or proxyless) of ns that sc
// configures, as Istio's SidecarScope is computed once per push. It is
// kept by snap and goes with it.
func Shared(snap *model.Snapshot, sc *model.Sidecar, ns string, o routes.Options) *View {
	k := viewKey{sidecar: sc, ns: ns, exportTo: strings.Join(o.DefaultExportTo, ",")}
	return model.SharedValue(snap, k, func() *View { return Of(snap, sc, ns, o) })
}
