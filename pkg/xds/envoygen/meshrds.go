package envoygen

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// The virtual hosts of a sidecar's route "<port>", as Istio's
// BuildSidecarOutboundVirtualHosts makes them: the VirtualServices bound
// to "mesh" that the proxy sees, in their order, each take the services
// of the port their hosts name (a wildcard host only those for which it
// is the most specific VirtualService host) and, on port 80 or beside a
// service, their hosts that name no service of the port; every other
// service declaring HTTP on the port (or no protocol) keeps its default
// route. The first virtual host of a name, and the first of a domain,
// win; the virtual hosts are sorted by name.

// meshVS is what the route configurations of one proxy read of the
// VirtualServices it sees: nil when it sees none.
type meshVS struct {
	vss   []*model.VirtualService
	hosts [][]string // routes.Hosts of each
	// exact is the first VirtualService naming each exact host, wild the
	// first naming each wildcard host (Istio's
	// computeWildcardHostVirtualServiceIndex).
	exact map[string]int
	wild  map[string]int
}

// meshVirtualServices returns what b's proxy sees of the VirtualServices:
// of a proxy configured by a Sidecar, indexed once per view (and so per
// snapshot) and shared.
func (b *builder) meshVirtualServices() *meshVS {
	if len(b.snap.Resources().VirtualServices) == 0 {
		return nil
	}
	if sc := b.egress(); sc.vs != nil {
		sc.meshOnce.Do(func() { sc.mesh = b.indexMeshVS(sc.vss) })
		return sc.mesh
	}
	return b.indexMeshVS(b.appliedMeshVirtualServices())
}

// appliedMeshVirtualServices are the VirtualServices bound to sidecars
// that b's proxy sees and its Sidecar imports: one rule for its http
// routes and its tls and tcp chains.
func (b *builder) appliedMeshVirtualServices() []*model.VirtualService {
	if sc := b.egress(); sc.vs != nil {
		return sc.vss // those its Sidecar imports, shared: not to be changed
	}
	vss, _ := b.g.Mesh.Routes.MeshVirtualServices(b.snap, b.p.Namespace)
	return vss
}

// indexMeshVS indexes vss by their hosts; nil for none.
func (b *builder) indexMeshVS(vss []*model.VirtualService) *meshVS {
	if len(vss) == 0 {
		return nil
	}
	m := &meshVS{vss: vss, hosts: make([][]string, len(vss)), exact: map[string]int{}, wild: map[string]int{}}
	for i, vs := range vss {
		m.hosts[i] = routes.Hosts(b.snap, vs)
		for _, h := range m.hosts[i] {
			index := m.exact
			if routes.Wildcarded(h) {
				index = m.wild
			}
			if _, ok := index[h]; !ok {
				index[h] = i
			}
		}
	}
	return m
}

// listenerVirtualServices is meshVirtualServices of the egress listener
// l alone, once per scope.
func (b *builder) listenerVirtualServices(l *listenerView) *meshVS {
	l.meshOnce.Do(func() {
		all := b.meshVirtualServices()
		if all == nil {
			return
		}
		var vss []*model.VirtualService
		for _, vs := range all.vss {
			if l.vs[vs.Meta] {
				vss = append(vss, vs)
			}
		}
		l.mesh = b.indexMeshVS(vss)
	})
	return l.mesh
}

// claims returns the VirtualService whose host is the most specific match
// of the service host h: one naming it exactly, else the one with the
// longest wildcard host matching it; -1 for none.
func (m *meshVS) claims(h string) int {
	if i, ok := m.exact[h]; ok {
		return i
	}
	best, bestHost := -1, ""
	for w, i := range m.wild {
		if !routes.HostsMatch(w, h) {
			continue
		}
		if best < 0 || len(w) > len(bestHost) || (len(w) == len(bestHost) && w < bestHost) {
			best, bestHost = i, w
		}
	}
	return best
}

// portVHost is one virtual host of a route "<port>": a service's default
// route (routes nil) or a VirtualService's routes.
type portVHost struct {
	name    string
	domains []string
	svc     *model.Service
	routes  [][]byte // in wire form
}

// domainsPerHost is about how many domains a service's virtual host has
// (its FQDN and short names, with and without the port, and its VIPs).
const domainsPerHost = 8

// portVirtualHosts are the virtual hosts of route "<port>" for b's proxy,
// sorted by name; svcs are the services with port (whatever its
// protocol), mesh the VirtualServices the proxy sees.
func (b *builder) portVirtualHosts(port uint32, svcs []*model.Service, mesh *meshVS) []portVHost {
	httpAt := func(svc *model.Service) bool {
		for _, sp := range svc.Ports {
			if sp.Port == port {
				p := protocolOf(sp)
				return p.isHTTP() || p == protoAuto
			}
		}
		return false
	}
	byHost := make(map[string]*model.Service, len(svcs))
	wildSvc := false
	for _, svc := range svcs {
		byHost[svc.Hostname] = svc
		wildSvc = wildSvc || routes.Wildcarded(svc.Hostname)
	}
	type wrapper struct {
		vsHosts []string
		svcs    []*model.Service
		routes  [][]byte
	}
	var wrappers []wrapper
	covered := map[string]bool{}
	if mesh != nil {
		scope := routes.Scope{Port: port, Gateway: routes.Mesh, Proxy: routes.Proxy{Namespace: b.p.Namespace, Labels: b.p.Labels}}
		for i, vs := range mesh.vss {
			if port != 80 && !selectsService(mesh.hosts[i], byHost, wildSvc) {
				continue
			}
			rs, err := b.g.Mesh.Routes.MemoWireRoutes(&b.g.meshMemo, b.snap, vs, scope)
			if err != nil {
				// Left out, as Istio leaves it; MeshRouteProblems says why.
				continue
			}
			var other []string
			var matching []*model.Service
			for _, h := range mesh.hosts[i] {
				if !routes.Wildcarded(h) {
					if svc := byHost[h]; svc != nil {
						matching = append(matching, svc)
					} else {
						other = append(other, h)
					}
					continue
				}
				found := false
				for _, svc := range svcs {
					if !routes.HostsMatch(svc.Hostname, h) {
						continue
					}
					found = true
					if mesh.claims(svc.Hostname) == i {
						matching = append(matching, svc)
					}
				}
				if !found {
					other = append(other, h)
				}
			}
			matching = slices.DeleteFunc(matching, func(s *model.Service) bool { return !httpAt(s) })
			if len(matching) == 0 && port != 80 {
				continue
			}
			wrappers = append(wrappers, wrapper{vsHosts: other, svcs: matching, routes: rs})
			for _, s := range matching {
				covered[s.Hostname] = true
			}
		}
	}
	var defaults []*model.Service
	for _, svc := range svcs {
		if !covered[svc.Hostname] && httpAt(svc) {
			defaults = append(defaults, svc)
		}
	}
	slices.SortFunc(defaults, func(x, y *model.Service) int { return cmp.Compare(x.Hostname, y.Hostname) })
	for _, svc := range defaults {
		wrappers = append(wrappers, wrapper{svcs: []*model.Service{svc}})
	}

	portName := strconv.FormatUint(uint64(port), 10)
	hosts := 0 // sized once: a virtual host name and its domains each
	for _, w := range wrappers {
		hosts += len(w.vsHosts) + len(w.svcs)
	}
	names := make(map[string]bool, hosts)
	seen := make(map[string]bool, domainsPerHost*hosts)
	known := make(map[string]bool, 2*hosts)
	for _, w := range wrappers {
		for _, svc := range w.svcs {
			known[svc.Hostname+":"+portName] = true
			known[svc.Hostname] = true
		}
	}
	var out []portVHost
	add := func(h string, domains, alt []string, svc *model.Service, rs [][]byte) {
		name := h + ":" + portName
		if names[name] {
			return
		}
		names[name] = true
		kept := make([]string, 0, len(domains))
		for _, d := range domains {
			ld := strings.ToLower(d)
			if seen[ld] || (slices.Contains(alt, d) && known[d]) {
				continue
			}
			seen[ld] = true
			kept = append(kept, d)
		}
		if len(kept) > 0 {
			out = append(out, portVHost{name: name, domains: kept, svc: svc, routes: rs})
		}
	}
	for _, w := range wrappers {
		for _, h := range w.vsHosts {
			add(h, []string{h}, nil, nil, w.routes)
		}
		for _, svc := range w.svcs {
			domains, alt := b.serviceDomains(svc)
			if w.routes == nil {
				add(svc.Hostname, domains, alt, svc, nil)
			} else {
				add(svc.Hostname, domains, alt, nil, w.routes)
			}
		}
	}
	slices.SortStableFunc(out, func(x, y portVHost) int { return cmp.Compare(x.name, y.name) })
	return out
}

// selectsService reports whether one of hosts names a service of byHost
// (a wildcard on either side matching), as Istio's selectVirtualServices;
// wildSvc says whether a host of byHost is a wildcard.
func selectsService(hosts []string, byHost map[string]*model.Service, wildSvc bool) bool {
	for _, h := range hosts {
		if byHost[h] != nil {
			return true
		}
		if !wildSvc && !routes.Wildcarded(h) {
			continue
		}
		for sh := range byHost {
			if (routes.Wildcarded(h) || routes.Wildcarded(sh)) && routes.HostsMatch(h, sh) {
				return true
			}
		}
	}
	return false
}
