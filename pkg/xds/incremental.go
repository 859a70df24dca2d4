package xds

import (
	"slices"
	"sync"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// A push carries what it changed since the one before: everything, or
// the endpoints of some services and nothing else (a pod starting,
// stopping or moving). A proxy's holdings of each type remember the push
// and scope they were last brought up to date with (its basis); from
// there, the pushes since tell what it may lack. After endpoint changes
// that is the load assignments of those services' clusters that it
// subscribes to, and nothing of the other types: those are neither
// regenerated nor compared nor sent. After VirtualServices or
// DestinationRules changed, a sidecar that sees none of them (their
// exportTo, its Sidecar's imports) regenerates nothing, and one that sees
// some regenerates the resources that read them (envoygen's Rules);
// routers regenerate their listeners and routes in full, and proxyless
// gRPC everything. A proxy whose scope changed, or that is further behind
// than the history reaches, is answered in full.

// historyLen is how many pushes back a proxy's basis may be and still be
// brought up to date by their changes alone.
const historyLen = 64

// change is what one push changed since the push before it.
type change struct {
	seq  uint64
	full bool // everything may have changed
	endpointChanges
}

// trigger is the push trigger c counts as (pilot_push_triggers' type):
// "service" when services changed, "endpoint" when only endpoints (or
// pods), "config" otherwise.
func (c change) trigger() string {
	switch {
	case c.full || c.authz || len(c.sidecars) > 0 || c.rules != nil:
		return "config"
	case len(c.services) > 0:
		return "service"
	}
	return "endpoint"
}

// endpointChanges are changes of services, endpoints, pods and
// authorization only.
type endpointChanges struct {
	hosts map[string]bool     // the services whose endpoints changed
	addrs map[string]bool     // the addresses of their endpoints, before and after
	pods  map[model.Meta]bool // the pods that changed
	authz bool                // AuthorizationPolicies or RequestAuthentications changed
	// authzScopes are where those that changed apply; none: anywhere.
	authzScopes []model.PolicyScope
	// services changed otherwise (added, removed, their definition), and
	// by type URL the names of what reads them for Envoy, before or after
	// (envoygen.ServiceNames).
	services     map[string]bool
	serviceNames map[string]map[string]bool
	// sidecars are the namespaces of the Sidecars that changed: a proxy
	// of another namespace keeps its Sidecar, unless one of the root
	// namespace changed.
	sidecars map[string]bool
	// rules are the VirtualServices and DestinationRules that changed
	// (nil: none), with what reads them for Envoy: a sidecar that sees
	// none of them keeps its resources (envoygen.SeesRules).
	rules *envoygen.Rules
}

// add adds o to c, allocating what c lacks.
func (c *endpointChanges) add(o endpointChanges) {
	c.authz = c.authz || o.authz
	c.authzScopes = append(slices.Clip(c.authzScopes), o.authzScopes...)
	c.services = union(c.services, o.services)
	for typeURL, names := range o.serviceNames {
		if c.serviceNames == nil {
			c.serviceNames = map[string]map[string]bool{}
		}
		c.serviceNames[typeURL] = union(c.serviceNames[typeURL], names)
	}
	c.sidecars = union(c.sidecars, o.sidecars)
	c.rules = c.rules.Merge(o.rules)
	c.hosts = union(c.hosts, o.hosts)
	c.addrs = union(c.addrs, o.addrs)
	c.pods = union(c.pods, o.pods)
}

func union[K comparable](m, o map[K]bool) map[K]bool {
	if len(o) == 0 {
		return m
	}
	if m == nil {
		m = make(map[K]bool, len(o))
	}
	for k := range o {
		m[k] = true
	}
	return m
}

// authzFor reports whether the authorization changes may change what
// applies to the workload of namespace and labels in snap.
func (c endpointChanges) authzFor(snap *model.Snapshot, namespace string, labels map[string]string) bool {
	if !c.authz || len(c.authzScopes) == 0 {
		return c.authz
	}
	return slices.ContainsFunc(c.authzScopes, func(p model.PolicyScope) bool {
		return p.Selects(snap.Options.RootNamespace, namespace, labels)
	})
}

// touches reports whether the changes may change the scope of w in snap
// (see envoygen's Scope): its pod changed, or an endpoint at one of its
// addresses, the only endpoints a scope reads besides headless ones,
// whose changes are never endpoint changes alone.
func (c endpointChanges) touches(w *identity.Workload, snap *model.Snapshot) bool {
	if len(c.services) > 0 { // a service may select the workload
		return true
	}
	// Which load assignments it shares depends on the DestinationRules.
	if c.rules.HasDestinationRules() {
		return true
	}
	// Its Sidecar may have changed, and with it its scope's key.
	if c.sidecars[w.Namespace] || c.sidecars[snap.Options.RootNamespace] {
		return true
	}
	if w.Pod != "" && c.pods[model.Meta{Name: w.Pod, Namespace: w.Namespace}] {
		return true
	}
	changed := func(ip string) bool { return c.addrs[ip] }
	if slices.ContainsFunc(w.IPs, changed) {
		return true
	}
	pod := w.RegistryPod(snap)
	return pod != nil && slices.ContainsFunc(pod.IPs, changed)
}

// fullAfter reports whether p's resources of typeURL are generated in
// full after changes c since push from: a router's listeners and routes
// after authorization, services or pods changed, as they read its
// Gateways' servers, the services they route to and its authorization
// as a whole, or after rules changed that its Gateways read
// (routerSeesRules); and everything of proxyless gRPC after a
// VirtualService or DestinationRule changed that it sees (seesRules).
func (st *pushState) fullAfter(p *proxy, typeURL string, c endpointChanges, from uint64) bool {
	w := p.wl
	if c.rules != nil && !w.Envoy {
		return st.seesRules(p, c.rules, from)
	}
	if !w.Router || (typeURL != typeListener && typeURL != typeRoute) {
		return false
	}
	return c.authz || len(c.services) > 0 || len(c.pods) > 0 || (c.rules != nil && st.routerSeesRules(p, c.rules, from))
}

// history is the changes of the last historyLen pushes.
type history struct {
	mu   sync.Mutex
	ring [historyLen]change
}

func (h *history) record(c change) {
	h.mu.Lock()
	h.ring[c.seq%historyLen] = c
	h.mu.Unlock()
}

// since returns the services whose endpoints changed after push from up
// to push to, or false when something else changed or the history does
// not reach back to from.
func (h *history) since(from, to uint64) (endpointChanges, bool) {
	if from > to || to-from >= historyLen {
		return endpointChanges{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out endpointChanges
	for seq := from + 1; seq <= to; seq++ {
		c := h.ring[seq%historyLen]
		if c.seq != seq || c.full {
			return endpointChanges{}, false
		}
		if from+1 == to {
			return c.endpointChanges, true // shared, read-only
		}
		out.add(c.endpointChanges)
	}
	return out, true
}

// classify is what st changes since prev, the push state before it.
// prompt reports whether snap, after the model pushed last, changes only
// endpoints, pods and authorization: changes that cost what they touch,
// so that after a quiet period they need not wait for more. A Service
// added or changed waits for quiet: the pods and EndpointSlices made with
// it follow within moments, and its routes should not reach proxies
// before its endpoints. VirtualServices and DestinationRules wait too, as
// other configuration does: they are often applied several at once.
func (s *Server) prompt(snap *model.Snapshot) bool {
	prev := s.state.Load().snap
	d := model.Diff(prev, s.mesh.Load().Derive(snap))
	return prev.Version != "" && !d.Config && len(d.Services) == 0 && len(d.VirtualServices) == 0 && len(d.DestinationRules) == 0
}

func (s *Server) classify(prev, st *pushState) change {
	c := change{seq: st.seq, full: true}
	if st.mesh == nil || prev.snap.Version == "" || st.snap.Version == "" {
		return c
	}
	// A meshNetworks change alone changes network gateways, which load
	// assignments alone read.
	netsChanged := prev.mesh != st.mesh
	if netsChanged && !st.mesh.OnlyNetworksDiffer(prev.mesh) {
		return c
	}
	d := model.Diff(prev.snap, st.snap)
	if d.Config { // Gateways too: routers' listeners and routes
		return c
	}
	// An endpoint change that more than load assignments read is a change
	// of its service.
	for host := range d.Endpoints {
		if st.mesh.Envoy.EndpointsReadElsewhere(prev.snap, st.snap, host) || s.gen.EndpointsReadElsewhere(prev.snap, st.snap, host) {
			delete(d.Endpoints, host)
			if d.Services == nil {
				d.Services = map[string]bool{}
			}
			d.Services[host] = true
		}
	}
	c.full, c.hosts, c.pods, c.authz, c.services = false, d.Endpoints, d.Pods, d.Authorization, d.Services
	c.authzScopes = d.AuthorizationScopes
	for _, sc := range d.Sidecars {
		if c.sidecars == nil {
			c.sidecars = map[string]bool{}
		}
		c.sidecars[sc.Namespace] = true
	}
	c.rules = envoygen.ChangedRules(prev.snap, st.snap, d)
	for host := range d.Services {
		for _, snap := range []*model.Snapshot{prev.snap, st.snap} {
			envoygen.ServiceNames(snap, host, func(typeURL, name string) {
				if c.serviceNames == nil {
					c.serviceNames = map[string]map[string]bool{}
				}
				if c.serviceNames[typeURL] == nil {
					c.serviceNames[typeURL] = map[string]bool{}
				}
				c.serviceNames[typeURL][name] = true
			})
		}
	}
	for host := range d.Endpoints {
		for _, svc := range []*model.Service{prev.snap.Service(host), st.snap.Service(host)} {
			if svc == nil {
				continue
			}
			for _, eps := range svc.Endpoints {
				for _, ep := range eps {
					if c.addrs == nil {
						c.addrs = map[string]bool{}
					}
					c.addrs[ep.Address] = true
				}
			}
		}
	}
	if netsChanged {
		before := prev.snap.NetworkGateways(networksOf(prev))
		after := st.snap.NetworkGateways(networksOf(st))
		for _, host := range st.snap.GatewayChangedHosts(before, after) {
			if c.services[host] {
				continue
			}
			if c.hosts == nil {
				c.hosts = map[string]bool{}
			}
			c.hosts[host] = true
		}
	}
	return c
}

// basis is the push and scope that a proxy's holdings of one type were
// last brought up to date with; the zero basis is none.
type basis struct {
	seq   uint64
	scope string
	set   bool
}

// changesSince returns the services whose endpoints changed between b and
// st for a proxy of scope, or false when the proxy must be answered in
// full: no basis, another scope, or more than endpoints changed.
func (s *Server) changesSince(st *pushState, b basis, scope string) (endpointChanges, bool) {
	if !b.set || b.scope != scope {
		return endpointChanges{}, false
	}
	return st.since(&s.history, b.seq)
}

// changedNames returns the names among names (sorted) of the resources of
// typeURL that c may have changed for proxy p: the load assignments of the
// services whose endpoints changed, and the resources that read
// authorization when it changed. k names the list, so that the proxies
// sharing it share the answer.
//
// With wildcard, names are what the proxy holds, and the names of what
// reads a changed service are returned too, held or not: they may be new.
//
// The names are sorted and unique; callers must not modify them. key is
// namesKey of them when they are shared by the proxies of one key, and
// empty otherwise.
func (st *pushState) changedNames(p *proxy, typeURL string, c endpointChanges, k affectedKey, names func(yield func(string) bool), wildcard bool) (changed []string, key string) {
	c.authz = c.authz && c.authzFor(st.snap, p.wl.Namespace, p.wl.LabelsIn(st.snap))
	ruleNames := st.ruleNamesFor(p, c, k.from, typeURL)
	if c.authz || len(c.services) > 0 || len(ruleNames) > 0 || typeURL != typeEndpoint {
		k.typeURL, k.envoy, k.authz, k.rules = typeURL, p.wl.Envoy, c.authz, len(ruleNames) > 0
	}
	if wildcard && p.wl.Envoy {
		// An Envoy sidecar's wildcard types are not endpoints: what
		// changed is what reads authorization and the changed services,
		// held or not.
		var out []string
		if c.authz {
			out = append(out, envoygen.AuthorizationReaders(typeURL)...)
		}
		for n := range c.serviceNames[typeURL] {
			out = append(out, n)
		}
		for n := range ruleNames {
			out = append(out, n)
		}
		slices.Sort(out)
		return slices.Compact(out), ""
	}
	a, ok := st.affectedCached(k)
	if !ok {
		a = st.affected(k, names, changedBy(c, typeURL, p.wl.Envoy, ruleNames))
	}
	if !wildcard || len(c.serviceNames[typeURL])+len(ruleNames) == 0 {
		return a.names, a.key
	}
	out := slices.Clone(a.names)
	for n := range c.serviceNames[typeURL] {
		out = append(out, n)
	}
	for n := range ruleNames {
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), ""
}

// readsAnyService reports whether proxyless gRPC's resource typeURL/name
// reads one of the services of hosts.
func readsAnyService(typeURL, name string, hosts map[string]bool) bool {
	for h := range hosts {
		if grpcgen.ReadsService(typeURL, name, h) {
			return true
		}
	}
	return false
}

// since is history.since(from, st.seq), once per push state and from:
// the proxies of a fleet share their basis.
func (st *pushState) since(h *history, from uint64) (endpointChanges, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if r, ok := st.sinceCache[from]; ok {
		return r.endpointChanges, r.ok
	}
	c, ok := h.since(from, st.seq)
	if st.sinceCache == nil {
		st.sinceCache = map[uint64]sinceResult{}
	}
	st.sinceCache[from] = sinceResult{c, ok}
	return c, ok
}

type sinceResult struct {
	endpointChanges
	ok bool
}

// affectedKey names a list of names, the changes since a basis and what
// of them is asked, within one push state.
type affectedKey struct {
	names   any // *nameSet, a response, or the versions a client holds
	from    uint64
	typeURL string // for changes that are not endpoints'
	envoy   bool
	authz   bool // the proxy's authorization changed
	rules   bool // it sees a VirtualService or DestinationRule that changed
}

// changedBy tells the names of typeURL that c changes for an Envoy
// sidecar or, when not envoy, proxyless gRPC.
func changedBy(c endpointChanges, typeURL string, envoy bool, ruleNames map[string]bool) func(string) bool {
	readsAuthz := grpcgen.ReadsAuthorization
	if envoy {
		readsAuthz = envoygen.ReadsAuthorization
	}
	return func(n string) bool {
		switch {
		case typeURL == typeEndpoint && c.hosts[resource.ClusterHost(n)]:
		case c.authz && readsAuthz(typeURL, n):
		case envoy && c.serviceNames[typeURL][n]:
		case ruleNames[n]:
		case !envoy && readsAnyService(typeURL, n, c.services):
		default:
			return false
		}
		return true
	}
}

// affectedNames are the names of one affectedKey that changed, and their
// namesKey.
type affectedNames struct {
	names []string
	key   string
}

// affectedCached returns what affected returned for k, if it did.
func (st *pushState) affectedCached(k affectedKey) (affectedNames, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	r, ok := st.affectedCache[k]
	return r, ok
}

// affected returns the names that changed says changed, once per push
// state and key.
func (st *pushState) affected(k affectedKey, names func(yield func(string) bool), changed func(string) bool) affectedNames {
	st.mu.Lock()
	defer st.mu.Unlock()
	if r, ok := st.affectedCache[k]; ok {
		return r
	}
	var out affectedNames
	for n := range names {
		if changed(n) {
			out.names = append(out.names, n)
		}
	}
	out.key = namesKey(out.names)
	if st.affectedCache == nil {
		st.affectedCache = map[affectedKey]affectedNames{}
	}
	st.affectedCache[k] = out
	return out
}

// generatedType reports whether typeURL is generated from the model, and
// so follows its changes.
func generatedType(typeURL string) bool {
	switch typeURL {
	case typeCluster, typeEndpoint, typeListener, typeRoute:
		return true
	}
	return false
}
