package model

import (
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
)

// Change is what differs between two snapshots. A pod starting,
// stopping or moving changes endpoints and pods only; generators then
// rebuild what reads those, not everything.
type Change struct {
	// Config is true when anything but endpoints, pods, authorization,
	// services, Sidecars, VirtualServices and DestinationRules differs: a
	// PeerAuthentication, a Gateway, a Telemetry or the options. The other
	// fields are empty then: everything may differ.
	Config bool
	// Authorization is true when AuthorizationPolicies or
	// RequestAuthentications differ, and AuthorizationScopes are where
	// those that differ apply, before and after: a workload none of them
	// selects keeps its authorization.
	Authorization       bool
	AuthorizationScopes []PolicyScope
	// Services are the hostnames of services added, removed or changed
	// otherwise than in their endpoints.
	Services map[string]bool
	// Endpoints are the hostnames of the other services whose endpoints
	// differ.
	Endpoints map[string]bool
	// Pods are the registry's pods added, removed or changed, and those of
	// remote clusters' registries (by namespace and name alone: a change
	// of a pod in one cluster is one of the pods of that name in every
	// cluster).
	Pods map[Meta]bool
	// Sidecars are the Sidecars added, removed or changed (those before
	// and after a change): a proxy configured by none of them, before or
	// after, keeps its configuration.
	Sidecars []*Sidecar
	// VirtualServices and DestinationRules are those added, removed or
	// changed (a changed one before and after): the resources that read
	// neither, before or after, are unchanged.
	VirtualServices  []*VirtualService
	DestinationRules []*DestinationRule
}

// None reports whether nothing differs.
func (c Change) None() bool {
	return !c.Config && !c.Authorization && len(c.Services) == 0 && len(c.Endpoints) == 0 && len(c.Pods) == 0 && len(c.Sidecars) == 0 &&
		len(c.VirtualServices) == 0 && len(c.DestinationRules) == 0
}

// Diff is what differs from old to new. WorkloadEntries count through the
// endpoints they give services: nothing else reads them. ServiceEntries
// count through the services they make: a changed entry changes its
// hosts' services, or only their endpoints.
func Diff(old, new *Snapshot) Change {
	if old == new || (old.Version != "" && old.Version == new.Version) {
		return Change{}
	}
	if old.Options != new.Options || old.HasPods() != new.HasPods() || !sameRules(&old.res, &new.res) {
		return Change{Config: true}
	}
	c := Change{Authorization: !sameAuthorization(&old.res, &new.res)}
	if c.Authorization {
		c.AuthorizationScopes = changedScopes(old.res.AuthorizationPolicies, new.res.AuthorizationPolicies, nil,
			func(p *AuthorizationPolicy) PolicyScope { return scopeOf(p.Meta, p.Spec) })
		c.AuthorizationScopes = changedScopes(old.res.RequestAuthentications, new.res.RequestAuthentications, c.AuthorizationScopes,
			func(p *RequestAuthentication) PolicyScope { return scopeOf(p.Meta, p.Spec) })
	}
	mark := func(m *map[string]bool, host string) {
		if *m == nil {
			*m = map[string]bool{}
		}
		(*m)[host] = true
	}
	// A gateway Service's ingress address that changes changes the load
	// assignments of every other service with endpoints in a network
	// (split-horizon EDS, netgateways.go).
	exposed := false
	compare := func(host string, os, ns *Service) {
		if ns != os && (ns == nil && len(os.Exposures) > 0 || ns != nil && !sameExposures(os.Exposures, ns.Exposures)) {
			exposed = true
		}
		switch {
		case ns == os: // shared by both snapshots: unchanged
		case ns == nil || !sameService(os, ns):
			mark(&c.Services, host)
		case !sameEndpoints(os.Endpoints, ns.Endpoints):
			mark(&c.Endpoints, host)
		}
	}
	if old.hosts == new.hosts { // the same hostnames in the same order
		for i, os := range old.services {
			compare(os.Hostname, os, new.services[i])
		}
	} else {
		for _, os := range old.services {
			compare(os.Hostname, os, new.Service(os.Hostname))
		}
		for _, ns := range new.services {
			if old.Service(ns.Hostname) == nil {
				mark(&c.Services, ns.Hostname)
				exposed = exposed || len(ns.Exposures) > 0
			}
		}
	}
	if exposed {
		for _, svc := range new.services {
			if !c.Services[svc.Hostname] && hasNetworkEndpoints(svc) {
				mark(&c.Endpoints, svc.Hostname)
			}
		}
	}
	// Which service of a hostname a namespace sees depends on its
	// alternates: a change of them is one of the hostname's service.
	for _, h := range changedAlternates(old, new) {
		mark(&c.Services, h)
	}
	c.Pods = remotePodChanges(old.res.RemotePods, new.res.RemotePods, podChanges(old.res.Pods, new.res.Pods))
	c.Sidecars = changedSidecars(old.res.Sidecars, new.res.Sidecars)
	var ok bool
	if c.VirtualServices, ok = changedObjects(old.res.VirtualServices, new.res.VirtualServices, (*VirtualService).Parts); !ok {
		return Change{Config: true}
	}
	if c.DestinationRules, ok = changedObjects(old.res.DestinationRules, new.res.DestinationRules, (*DestinationRule).Parts); !ok {
		return Change{Config: true}
	}
	return c
}

// hasNetworkEndpoints reports whether an endpoint of svc names its
// network: a proxy of another network may reach it through a gateway.
func hasNetworkEndpoints(svc *Service) bool {
	for _, eps := range svc.Endpoints {
		for _, ep := range eps {
			if ep.Network != "" {
				return true
			}
		}
	}
	return false
}

// changedObjects are the objects of a or b that the other does not hold
// as they are, in a's order then b's. It reports false when a and b
// differ only in their order, which no change explains.
func changedObjects[T comparable](a, b []T, parts func(T) (Meta, proto.Message)) ([]T, bool) {
	if sameSpecs(a, b, parts) {
		return nil, true
	}
	index := func(l []T) map[Meta]T {
		out := make(map[Meta]T, len(l))
		for _, x := range l {
			m, _ := parts(x)
			out[m] = x
		}
		return out
	}
	inA, inB := index(a), index(b)
	same := func(x, y T) bool {
		_, xs := parts(x)
		_, ys := parts(y)
		return x == y || xs == ys || proto.Equal(xs, ys)
	}
	var out []T
	for _, l := range []struct {
		objs  []T
		other map[Meta]T
	}{{a, inB}, {b, inA}} {
		for _, x := range l.objs {
			m, _ := parts(x)
			if y, ok := l.other[m]; !ok || !same(x, y) {
				out = append(out, x)
			}
		}
	}
	return out, len(out) > 0
}

// changedSidecars are the Sidecars of a or b that the other does not hold
// as they are.
func changedSidecars(a, b []*Sidecar) []*Sidecar {
	if sameSpecs(a, b, (*Sidecar).Parts) {
		return nil
	}
	key := func(c *Sidecar) string { m, _ := c.Parts(); return m.Namespace + "/" + m.Name + "#" + c.Key() }
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, c := range a {
		inA[key(c)] = true
	}
	for _, c := range b {
		inB[key(c)] = true
	}
	var out []*Sidecar
	for _, c := range a {
		if !inB[key(c)] {
			out = append(out, c)
		}
	}
	for _, c := range b {
		if !inA[key(c)] {
			out = append(out, c)
		}
	}
	return out
}

// sameService reports whether a and b are the same service but for their
// endpoints.
func sameService(a, b *Service) bool {
	return a.Meta == b.Meta && a.Hostname == b.Hostname && a.Headless == b.Headless &&
		slices.Equal(a.Addresses, b.Addresses) && maps.Equal(a.Selector, b.Selector) && slices.Equal(a.Ports, b.Ports) &&
		slices.Equal(a.ExportTo, b.ExportTo) &&
		sameEntry(a.Entry, b.Entry) && sameExposures(a.Exposures, b.Exposures)
}

func sameEndpoints(a, b map[uint32][]Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for port, eps := range a {
		other, ok := b[port]
		if !ok || !slices.EqualFunc(eps, other, sameEndpoint) {
			return false
		}
	}
	return true
}

func sameEndpoint(a, b Endpoint) bool {
	return a.Address == b.Address && a.Port == b.Port && a.Locality == b.Locality && a.ServiceAccount == b.ServiceAccount &&
		a.Namespace == b.Namespace && a.Weight == b.Weight && a.Cluster == b.Cluster && a.Network == b.Network &&
		maps.Equal(a.Labels, b.Labels)
}

// podChanges walks two pod lists sorted by namespace and name.
func podChanges(old, new []*Pod) map[Meta]bool {
	var out map[Meta]bool
	mark := func(m Meta) {
		if out == nil {
			out = map[Meta]bool{}
		}
		out[m] = true
	}
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && byMeta(old[i].Meta, new[j].Meta) < 0):
			mark(old[i].Meta)
			i++
		case i == len(old) || byMeta(old[i].Meta, new[j].Meta) > 0:
			mark(new[j].Meta)
			j++
		default:
			if old[i] != new[j] && !samePod(old[i], new[j]) {
				mark(old[i].Meta)
			}
			i++
			j++
		}
	}
	return out
}

func samePod(a, b *Pod) bool {
	return a.UID == b.UID && a.ServiceAccount == b.ServiceAccount && maps.Equal(a.Labels, b.Labels) && slices.Equal(a.IPs, b.IPs)
}

// sameRules reports whether a and b hold equal PeerAuthentications,
// Gateways and Telemetries (which change any listener of the proxies
// they select). A Gateway may change any listener or route of a gateway:
// its changes are config changes. VirtualServices and DestinationRules
// are told one by one (Change.VirtualServices, DestinationRules).
func sameRules(a, b *Resources) bool {
	return sameSpecs(a.PeerAuthentications, b.PeerAuthentications, (*PeerAuthentication).Parts) &&
		sameSpecs(a.Gateways, b.Gateways, (*Gateway).Parts) &&
		sameSpecs(a.Telemetries, b.Telemetries, (*Telemetry).Parts)
}

// sameAuthorization reports whether a and b hold equal
// AuthorizationPolicies and RequestAuthentications.
func sameAuthorization(a, b *Resources) bool {
	return sameSpecs(a.AuthorizationPolicies, b.AuthorizationPolicies, (*AuthorizationPolicy).Parts) &&
		sameSpecs(a.RequestAuthentications, b.RequestAuthentications, (*RequestAuthentication).Parts)
}

func sameSpecs[T any](a, b []T, parts func(T) (Meta, proto.Message)) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool {
		xm, xs := parts(x)
		ym, ys := parts(y)
		return xm == ym && (xs == ys || proto.Equal(xs, ys))
	})
}

// changedScopes adds to out the scopes of the policies added, removed or
// changed from a to b, a changed one's before and after.
func changedScopes[T interface {
	comparable
	Parts() (Meta, proto.Message)
}](a, b []T, out []PolicyScope, scope func(T) PolicyScope) []PolicyScope {
	old := make(map[Meta]T, len(a))
	for _, x := range a {
		m, _ := x.Parts()
		old[m] = x
	}
	for _, y := range b {
		m, ys := y.Parts()
		x, ok := old[m]
		delete(old, m)
		if ok {
			if _, xs := x.Parts(); x == y || xs == ys || proto.Equal(xs, ys) {
				continue
			}
			out = append(out, scope(x))
		}
		out = append(out, scope(y))
	}
	for _, x := range old {
		out = append(out, scope(x))
	}
	return out
}

// Parts are what identify and define a policy: equal parts, equal
// policies. Sources hash them into versions.
func (p *PeerAuthentication) Parts() (Meta, proto.Message) {
	// Its creation time counts as part of its name: it decides which of
	// several policies applies.
	return createdParts(p.Meta, p.Created), p.Spec
}

// Parts of a Gateway or a VirtualService count its creation time, as a
// PeerAuthentication's: of conflicting ones, the oldest applies.
func (g *Gateway) Parts() (Meta, proto.Message) { return createdParts(g.Meta, g.Created), g.Spec }
func (v *VirtualService) Parts() (Meta, proto.Message) {
	return createdParts(v.Meta, v.Created), v.Spec
}

func createdParts(m Meta, created time.Time) Meta {
	m.Name += "@" + created.UTC().Format(time.RFC3339Nano)
	return m
}

func (p *AuthorizationPolicy) Parts() (Meta, proto.Message)   { return p.Meta, p.Spec }
func (p *RequestAuthentication) Parts() (Meta, proto.Message) { return p.Meta, p.Spec }

// Parts of a DestinationRule count its creation time as part of its name:
// it decides which of several rules' traffic policy applies.
func (p *DestinationRule) Parts() (Meta, proto.Message) {
	m := p.Meta
	m.Name += "@" + p.Created.UTC().Format(time.RFC3339Nano)
	return m, p.Spec
}

// changedAlternates are the hostnames whose alternative services of
// ServiceEntries (Snapshot.choose) differ between old and new, as the
// services of new (or old) name them.
func changedAlternates(old, new *Snapshot) []string {
	if len(old.alternates) == 0 && len(new.alternates) == 0 {
		return nil
	}
	same := func(a, b []*Service) bool {
		return slices.EqualFunc(a, b, func(x, y *Service) bool { return sameService(x, y) && sameEndpoints(x.Endpoints, y.Endpoints) })
	}
	var out []string
	for _, m := range []map[string][]*Service{old.alternates, new.alternates} {
		for h := range m {
			if same(old.alternates[h], new.alternates[h]) || slices.Contains(out, h) {
				continue
			}
			out = append(out, h)
		}
	}
	// The services of these hostnames may be named with a final dot.
	for i, h := range out {
		if new.Service(h) == nil && old.Service(h) == nil {
			out[i] = h + "."
		}
	}
	slices.Sort(out)
	return out
}
