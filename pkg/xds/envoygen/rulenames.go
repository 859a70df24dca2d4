package envoygen

import (
	"slices"
	"strconv"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// What a VirtualService or DestinationRule change may change: which
// proxies see it (SeesRules) and which of their resources read it
// (VirtualServiceNames, DestinationRuleNames). A sidecar that sees none
// of the rules that changed keeps its resources; one that sees some
// regenerates the resources that read any of them. Routers read
// VirtualServices through their Gateways' servers, which these readers
// do not follow: their listeners and routes are generated in full after
// any rule change.

// Rules are the VirtualServices and DestinationRules added, removed or
// changed between two snapshots, each as the snapshot before or after
// held it. The zero value is none; a Rules is not changed once built by
// its Add methods, and may then be shared.
type Rules struct {
	vss   []seenVS             // the roots bound to "mesh" a change reaches
	drs   []model.RuleAudience // of each DestinationRule that changed
	names map[string]map[string]bool
	// gateways are the Gateways ("ns/name") the changed roots bound to
	// gateways name; drHosts the hosts of the changed DestinationRules
	// (routerrules.go).
	gateways map[string]bool
	drHosts  []string
}

// ChangedRules are the VirtualServices and DestinationRules that d (the
// model's Diff from prev to next) says changed, each as both snapshots
// hold it: what reads it and who sees it, before and after; nil for none.
func ChangedRules(prev, next *model.Snapshot, d model.Change) *Rules {
	if len(d.VirtualServices)+len(d.DestinationRules) == 0 {
		return nil
	}
	r := &Rules{}
	for _, snap := range []*model.Snapshot{prev, next} {
		for _, vs := range d.VirtualServices {
			r.AddVirtualService(snap, vs)
		}
		for _, dr := range d.DestinationRules {
			r.AddDestinationRule(snap, dr)
		}
	}
	return r
}

// seenVS is a VirtualService and its hosts as the snapshot holding it
// resolves them.
type seenVS struct {
	vs    *model.VirtualService
	hosts []string
}

// AddVirtualService adds vs as snap holds it: a delegate (a
// VirtualService without hosts) through the roots of snap that delegate
// to it.
func (r *Rules) AddVirtualService(snap *model.Snapshot, vs *model.VirtualService) {
	if vs.Spec == nil {
		return
	}
	if len(vs.Spec.GetHosts()) > 0 {
		r.addRoot(snap, vs)
		return
	}
	for _, root := range snap.Resources().VirtualServices {
		if len(root.Spec.GetHosts()) > 0 && routes.Delegates(root, vs) {
			r.addRoot(snap, root)
		}
	}
}

func (r *Rules) addRoot(snap *model.Snapshot, vs *model.VirtualService) {
	r.addGateways(vs)
	if !routes.BoundToMesh(vs) {
		return // a gateway's alone
	}
	r.vss = append(r.vss, seenVS{vs: vs, hosts: routes.Hosts(snap, vs)})
	VirtualServiceNames(snap, vs, r.add)
}

// AddDestinationRule adds dr as snap holds it.
func (r *Rules) AddDestinationRule(snap *model.Snapshot, dr *model.DestinationRule) {
	r.drs = append(r.drs, snap.DestinationRuleAudience(dr))
	if dr.Spec != nil {
		r.drHosts = append(r.drHosts, routes.ResolveHost(snap, dr.Spec.GetHost(), dr.Namespace))
	}
	DestinationRuleNames(snap, dr, r.add)
}

func (r *Rules) add(typeURL, name string) {
	if r.names == nil {
		r.names = map[string]map[string]bool{}
	}
	if r.names[typeURL] == nil {
		r.names[typeURL] = map[string]bool{}
	}
	r.names[typeURL][name] = true
}

// HasDestinationRules reports whether a DestinationRule changed: which
// load assignments a proxy shares with others depends on them
// (EndpointScope).
func (r *Rules) HasDestinationRules() bool { return r != nil && len(r.drs) > 0 }

// Names are the names of the resources of typeURL that may read a rule
// of r, for any proxy that sees one (SeesRules); read-only.
func (r *Rules) Names(typeURL string) map[string]bool {
	if r == nil {
		return nil
	}
	return r.names[typeURL]
}

// Merge returns the rules of r and o, sharing what it can; nil is none.
func (r *Rules) Merge(o *Rules) *Rules {
	switch {
	case o == nil:
		return r
	case r == nil:
		return o
	}
	out := &Rules{vss: append(slices.Clip(r.vss), o.vss...), drs: append(slices.Clip(r.drs), o.drs...),
		drHosts: append(slices.Clip(r.drHosts), o.drHosts...)}
	for _, rr := range []*Rules{r, o} {
		for gw := range rr.gateways {
			out.addGateway(gw)
		}
		for typeURL, names := range rr.names {
			for n := range names {
				out.add(typeURL, n)
			}
		}
	}
	return out
}

// SeesRules reports whether a rule of r may apply to p in snap: a
// DestinationRule that may reach its namespace (model's
// DestinationRuleAudience), or a VirtualService bound to "mesh" that its
// namespace sees through exportTo and its Sidecar imports (as
// appliedMeshVirtualServices decides). Its labels are not read: a rule
// whose matches select other clients by theirs gives it equal resources,
// which are not sent again. Proxyless gRPC clients see rules alike (their
// Sidecar scopes them as it scopes Envoy sidecars). Of a router, which
// has the clusters of a sidecar of its namespace without a Sidecar, this
// is whether its clusters and load assignments may read them: a
// DestinationRule reaching its namespace; RouterSeesRules tells of its
// listeners and routes.
func (g *Generator) SeesRules(snap *model.Snapshot, p *Proxy, r *Rules) bool {
	if r == nil {
		return false
	}
	for _, a := range r.drs {
		if a.Reaches(p.Namespace) {
			return true
		}
	}
	if p.Router || len(r.vss) == 0 {
		return false
	}
	sc := snap.SidecarFor(p.Namespace, p.Labels)
	for _, v := range r.vss {
		if !g.Mesh.Routes.SeenFrom(v.vs, p.Namespace) {
			continue
		}
		if sc == nil {
			return true
		}
		for _, l := range sc.EgressListeners() {
			if model.ParseEgressHosts(l.GetHosts(), p.Namespace).ImportsVirtualService(v.vs.Namespace, v.hosts) {
				return true
			}
		}
	}
	return false
}

// VirtualServiceNames calls add with the type and name of every resource
// of a sidecar that may read vs, a VirtualService with hosts bound to
// "mesh", in snap, whichever proxy it is generated for:
//   - the route "80", where its hosts that name no service go, and of
//     every service one of its hosts matches, the route "<port>" of each
//     port and its sniffed route "<host>:<port>" (meshrds.go, rds.go),
//     and, when it has tls or tcp rules, its listeners, which those rules
//     make chains of (meshl4.go); listeners name routes, they do not read
//     http rules;
//   - the clusters and load assignments of the hosts it routes to, which
//     a Sidecar imports because it routes to them (sidecarscope.go).
//
// Its delegates' rules are read with it: the hosts they route to are
// added by whoever adds them (Rules.AddVirtualService adds a delegate's
// roots, DestinationRuleNames the roots of a delegate routing to a host).
func VirtualServiceNames(snap *model.Snapshot, vs *model.VirtualService, add func(typeURL, name string)) {
	hosts := routes.Hosts(snap, vs)
	l4 := len(vs.Spec.GetTls())+len(vs.Spec.GetTcp()) > 0
	add(resource.RouteType, "80")
	for _, svc := range snap.Services() {
		if slices.ContainsFunc(hosts, func(h string) bool { return routes.HostsMatch(h, svc.Hostname) }) {
			serviceRouteNames(snap, svc.Hostname, l4, add)
		}
	}
	dests := func(h string) { hostClusterNames(snap, h, nil, add) }
	routes.DestinationHosts(snap, vs, dests)
	for _, d := range snap.Resources().VirtualServices {
		if len(d.Spec.GetHosts()) == 0 && routes.Delegates(vs, d) {
			routes.DestinationHosts(snap, d, dests)
		}
	}
}

// DestinationRuleNames calls add with the type and name of every resource
// of a sidecar that may read dr in snap, whichever proxy it is generated
// for: of every service its host (maybe a wildcard) matches, the
// clusters and load assignments of each port and subset (cds.go, eds.go)
// and the routes of its ports, whose default routes take the rule's
// consistent hash (routes.DefaultRoute); and what reads the
// VirtualServices that route to one of those services, whose routes name
// its subsets and take its hash (VirtualServiceNames). Listeners do not
// read DestinationRules.
func DestinationRuleNames(snap *model.Snapshot, dr *model.DestinationRule, add func(typeURL, name string)) {
	if dr.Spec == nil {
		return
	}
	host := routes.ResolveHost(snap, dr.Spec.GetHost(), dr.Namespace)
	var subsets []string
	for _, ss := range dr.Spec.GetSubsets() {
		if ss.GetName() != "" {
			subsets = append(subsets, ss.GetName())
		}
	}
	matched := map[string]bool{}
	for _, svc := range snap.Services() {
		if !routes.HostsMatch(host, svc.Hostname) {
			continue
		}
		matched[svc.Hostname] = true
		hostClusterNames(snap, svc.Hostname, subsets, add)
		serviceRouteNames(snap, svc.Hostname, false, add)
		inboundClusterNames(svc, add)
	}
	if len(matched) == 0 {
		return
	}
	routesToMatched := func(vs *model.VirtualService) bool {
		found := false
		routes.DestinationHosts(snap, vs, func(h string) { found = found || matched[h] })
		return found
	}
	vss := snap.Resources().VirtualServices
	for _, vs := range vss {
		if !routesToMatched(vs) {
			continue
		}
		if len(vs.Spec.GetHosts()) > 0 {
			if routes.BoundToMesh(vs) {
				VirtualServiceNames(snap, vs, add)
			}
			continue
		}
		for _, root := range vss { // a delegate's rules are its roots'
			if len(root.Spec.GetHosts()) > 0 && routes.BoundToMesh(root) && routes.Delegates(root, vs) {
				VirtualServiceNames(snap, root, add)
			}
		}
	}
}

// inboundClusterNames calls add with the names of the inbound clusters
// "inbound|<port>||" the workloads of svc may have, whose connection pool
// and upstream protocol the DestinationRule for svc sets: one per target
// port of its endpoints, or of its ports.
func inboundClusterNames(svc *model.Service, add func(typeURL, name string)) {
	seen := map[uint32]bool{}
	name := func(port uint32) {
		if port != 0 && !seen[port] {
			seen[port] = true
			add(resource.ClusterType, inboundClusterName(port))
		}
	}
	for _, sp := range svc.Ports {
		switch {
		case sp.TargetPort != 0:
			name(sp.TargetPort)
		case sp.TargetPortName == "":
			name(sp.Port) // targetPort defaults to port
		}
		for _, ep := range svc.Endpoints[sp.Port] {
			name(ep.Port)
		}
	}
}

// hostClusterNames calls add with the names of the clusters and load
// assignments of the service of hostname in snap, and of the entries of
// other namespaces for it: one per port and subset of the rules for it
// (ServiceNames), and of extra subsets.
func hostClusterNames(snap *model.Snapshot, hostname string, extra []string, add func(typeURL, name string)) {
	svcs := snap.Alternates(hostname)
	if svc := snap.Service(hostname); svc != nil {
		svcs = append(slices.Clip(svcs), svc)
	}
	if len(svcs) == 0 {
		return
	}
	subsets := append([]string{""}, extra...)
	for _, dr := range snap.DestinationRulesOf(hostname) {
		for _, ss := range dr.Spec.GetSubsets() {
			if ss.GetName() != "" {
				subsets = append(subsets, ss.GetName())
			}
		}
	}
	for _, svc := range svcs {
		for _, sp := range svc.Ports {
			for _, subset := range subsets {
				name := resource.ClusterName(hostname, subset, sp.Port)
				add(resource.ClusterType, name)
				add(resource.EndpointType, name)
			}
		}
	}
}

// serviceRouteNames calls add with the names of the routes of the service
// of hostname in snap, and of the entries of other namespaces for it: the
// route "<port>" and "<host>:<port>" of each port; and, with listeners,
// its listeners (listenerNames).
func serviceRouteNames(snap *model.Snapshot, hostname string, listeners bool, add func(typeURL, name string)) {
	svcs := snap.Alternates(hostname)
	if svc := snap.Service(hostname); svc != nil {
		svcs = append(slices.Clip(svcs), svc)
	}
	for _, svc := range svcs {
		if listeners {
			listenerNames(svc, add)
		}
		for _, sp := range svc.Ports {
			add(resource.RouteType, strconv.FormatUint(uint64(sp.Port), 10))
			add(resource.RouteType, sniffedRouteName(hostname, sp.Port))
		}
	}
}
