package model

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
)

// Change is what differs between two snapshots. A pod starting,
// stopping or moving changes endpoints and pods only; generators then
// rebuild what reads those, not everything.
type Change struct {
	// Config is true when anything but endpoints, pods and authorization
	// differs: the services themselves (ports, addresses, selectors, a
	// service added or removed), a PeerAuthentication, a DestinationRule
	// or the options. The other fields are empty then: everything may
	// differ.
	Config bool
	// Authorization is true when AuthorizationPolicies or
	// RequestAuthentications differ.
	Authorization bool
	// Services are the hostnames of services added, removed or changed
	// otherwise than in their endpoints.
	Services map[string]bool
	// Endpoints are the hostnames of the other services whose endpoints
	// differ.
	Endpoints map[string]bool
	// Pods are the registry's pods added, removed or changed.
	Pods map[Meta]bool
}

// None reports whether nothing differs.
func (c Change) None() bool {
	return !c.Config && !c.Authorization && len(c.Services) == 0 && len(c.Endpoints) == 0 && len(c.Pods) == 0
}

// Diff is what differs from old to new. WorkloadEntries count through the
// endpoints they give services: nothing else reads them.
func Diff(old, new *Snapshot) Change {
	if old == new || (old.Version != "" && old.Version == new.Version) {
		return Change{}
	}
	if old.Options != new.Options || old.HasPods() != new.HasPods() || !sameRules(&old.res, &new.res) {
		return Change{Config: true}
	}
	c := Change{Authorization: !sameAuthorization(&old.res, &new.res)}
	mark := func(m *map[string]bool, host string) {
		if *m == nil {
			*m = map[string]bool{}
		}
		(*m)[host] = true
	}
	for host, os := range old.byHost {
		switch ns := new.byHost[host]; {
		case ns == os: // shared by both snapshots: unchanged
		case ns == nil || !sameService(os, ns):
			mark(&c.Services, host)
		case !sameEndpoints(os.Endpoints, ns.Endpoints):
			mark(&c.Endpoints, host)
		}
	}
	for host := range new.byHost {
		if old.byHost[host] == nil {
			mark(&c.Services, host)
		}
	}
	c.Pods = podChanges(old.res.Pods, new.res.Pods)
	return c
}

// sameService reports whether a and b are the same service but for their
// endpoints.
func sameService(a, b *Service) bool {
	return a.Meta == b.Meta && a.Hostname == b.Hostname && a.Headless == b.Headless &&
		slices.Equal(a.Addresses, b.Addresses) && maps.Equal(a.Selector, b.Selector) && slices.Equal(a.Ports, b.Ports)
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
		a.Namespace == b.Namespace && a.Weight == b.Weight && maps.Equal(a.Labels, b.Labels)
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

// sameRules reports whether a and b hold equal PeerAuthentications and
// DestinationRules.
func sameRules(a, b *Resources) bool {
	return sameSpecs(a.PeerAuthentications, b.PeerAuthentications, (*PeerAuthentication).parts) &&
		sameSpecs(a.DestinationRules, b.DestinationRules, (*DestinationRule).parts)
}

// sameAuthorization reports whether a and b hold equal
// AuthorizationPolicies and RequestAuthentications.
func sameAuthorization(a, b *Resources) bool {
	return sameSpecs(a.AuthorizationPolicies, b.AuthorizationPolicies, (*AuthorizationPolicy).parts) &&
		sameSpecs(a.RequestAuthentications, b.RequestAuthentications, (*RequestAuthentication).parts)
}

func sameSpecs[T any](a, b []T, parts func(T) (Meta, proto.Message)) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool {
		xm, xs := parts(x)
		ym, ys := parts(y)
		return xm == ym && (xs == ys || proto.Equal(xs, ys))
	})
}

func (p *PeerAuthentication) parts() (Meta, proto.Message)    { return p.Meta, p.Spec }
func (p *AuthorizationPolicy) parts() (Meta, proto.Message)   { return p.Meta, p.Spec }
func (p *RequestAuthentication) parts() (Meta, proto.Message) { return p.Meta, p.Spec }
func (p *DestinationRule) parts() (Meta, proto.Message)       { return p.Meta, p.Spec }
