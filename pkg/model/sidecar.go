package model

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
)

// Sidecar is a networking.istio.io Sidecar: what the sidecar proxies it
// selects may reach (its egress hosts), and how traffic to destinations
// outside the registry is treated.
type Sidecar struct {
	Meta
	// Created is its creation time: of several Sidecars that could apply
	// to a workload, the oldest does. Zero when the source has none.
	Created time.Time
	Spec    *networkingv1.Sidecar
}

// Parts of a Sidecar count its creation time: it decides which of
// several applies.
func (c *Sidecar) Parts() (Meta, proto.Message) { return createdParts(c.Meta, c.Created), c.Spec }

// Sidecars returns the snapshot's Sidecars, sorted by namespace and name.
func (s *Snapshot) Sidecars() []*Sidecar { return s.res.Sidecars }

// SidecarFor returns the Sidecar that configures the sidecar proxy of a
// workload of namespace with labels, as Istio's push context chooses it:
//
//  1. of the namespace's Sidecars with a workloadSelector, the oldest
//     (then by name) whose labels the workload's carry; an empty selector
//     selects every workload;
//  2. else the namespace's oldest Sidecar without a selector;
//  3. else the root namespace's oldest Sidecar without a selector, its
//     "." hosts read as the workload's namespace.
//
// nil means none: the proxy sees every service exported to its namespace.
// Routers (gateways) are configured by no Sidecar.
func (s *Snapshot) SidecarFor(namespace string, labels map[string]string) *Sidecar {
	if len(s.res.Sidecars) == 0 {
		return nil
	}
	idx := s.sidecarIndex()
	for _, sc := range idx.byNamespace[namespace] {
		if sel := sc.Spec.GetWorkloadSelector(); sel != nil && !Matches(sel.GetLabels(), labels) {
			continue
		}
		return sc
	}
	return idx.root
}

// Key identifies the Sidecar and its content in one string: proxies
// configured by Sidecars of equal keys are configured alike. "" for nil.
func (c *Sidecar) Key() string {
	if c == nil {
		return ""
	}
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c.Spec)
	sum := sha256.Sum256(raw)
	m, _ := c.Parts()
	return m.Namespace + "/" + m.Name + "#" + hex.EncodeToString(sum[:8])
}

// sidecarIndex holds a snapshot's Sidecars in Istio's order of choice.
type sidecarIndex struct {
	// byNamespace: per namespace, those with a selector first, then
	// those without; each oldest first, then by name.
	byNamespace map[string][]*Sidecar
	// root is the root namespace's oldest Sidecar without a selector.
	root *Sidecar
}

type lazySidecars struct {
	once sync.Once
	idx  *sidecarIndex
}

func (s *Snapshot) sidecarIndex() *sidecarIndex {
	l := s.sidecars
	if l == nil {
		l = &lazySidecars{}
	}
	l.once.Do(func() {
		idx := &sidecarIndex{byNamespace: map[string][]*Sidecar{}}
		all := slices.Clone(s.res.Sidecars)
		slices.SortStableFunc(all, func(a, b *Sidecar) int {
			as, bs := a.Spec.GetWorkloadSelector() != nil, b.Spec.GetWorkloadSelector() != nil
			if as != bs {
				if as {
					return -1
				}
				return 1
			}
			return compareCreated(a.Meta, a.Created, b.Meta, b.Created)
		})
		for _, sc := range all {
			idx.byNamespace[sc.Namespace] = append(idx.byNamespace[sc.Namespace], sc)
			if idx.root == nil && sc.Namespace == s.Options.RootNamespace && sc.Spec.GetWorkloadSelector() == nil {
				idx.root = sc
			}
		}
		l.idx = idx
	})
	return l.idx
}

// EgressHosts are the hosts of one egress listener of a Sidecar, read for
// the proxies of one namespace as Istio reads them: "ns/host" with ns a
// namespace, "." (the proxy's own), "*" (any); a host "*" or
// "*.suffix" a wildcard; a "~" before the namespace excludes the hosts it
// names instead ("~/*" alone imports nothing). A host not of the form
// "ns/host" is ignored.
type EgressHosts struct {
	byNamespace map[string]*egressClass
}

type egressClass struct {
	exact    map[string]bool
	all      []string // exact and wildcard hosts
	wild     []string // the wildcard hosts of all
	excluded []string
}

// ParseEgressHosts reads hosts for the proxies of namespace.
func ParseEgressHosts(hosts []string, namespace string) EgressHosts {
	e := EgressHosts{byNamespace: map[string]*egressClass{}}
	for _, h := range hosts {
		if strings.Count(h, "/") != 1 {
			continue
		}
		ns, name, _ := strings.Cut(h, "/")
		excluded := strings.HasPrefix(ns, "~")
		if excluded {
			ns = cmp.Or(strings.TrimPrefix(ns, "~"), "*")
		}
		if ns == "." {
			ns = namespace
		}
		c := e.byNamespace[ns]
		if c == nil {
			c = &egressClass{exact: map[string]bool{}}
			e.byNamespace[ns] = c
		}
		if excluded {
			c.excluded = append(c.excluded, name)
			continue
		}
		if Wildcard(name) {
			c.wild = append(c.wild, name)
		} else {
			c.exact[name] = true
		}
		c.all = append(c.all, name)
	}
	return e
}

// hostSubsetOf reports whether host h is covered by pattern o, as Istio's
// host.Name.SubsetOf: equal, or o a wildcard whose suffix ends h (and, h
// a wildcard too, no shorter than o).
func hostSubsetOf(h, o string) bool {
	hw, ow := Wildcard(h), Wildcard(o)
	switch {
	case hw && ow:
		return len(h) >= len(o) && strings.HasSuffix(h[1:], o[1:])
	case hw:
		return false
	case ow:
		return strings.HasSuffix(h, o[1:])
	}
	return h == o
}

// hostsMatch reports whether hosts a and b share a name, as Istio's
// host.Name.Matches.
func hostsMatch(a, b string) bool {
	aw, bw := Wildcard(a), Wildcard(b)
	switch {
	case aw && bw:
		if len(a) < len(b) {
			return strings.HasSuffix(b[1:], a[1:])
		}
		return strings.HasSuffix(a[1:], b[1:])
	case aw:
		return strings.HasSuffix(b, a[1:])
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}

func (c *egressClass) excludes(h string) bool {
	return c != nil && slices.ContainsFunc(c.excluded, func(x string) bool { return hostSubsetOf(h, x) })
}

// matches is Istio's hostClassification.Matches: an exact host, or one of
// the hosts with a wildcard on either side covering h.
func (c *egressClass) matches(h string) bool {
	if c == nil {
		return false
	}
	if c.exact[h] {
		return true
	}
	candidates := c.wild // an exact host is covered by a wildcard alone
	if Wildcard(h) {
		candidates = c.all
	}
	for _, o := range candidates {
		if hostSubsetOf(h, o) {
			return true
		}
	}
	return false
}

// vsMatches is Istio's hostClassification.VSMatches for VirtualServices
// of Istio's own API: a wildcard on either side matching both ways.
func (c *egressClass) vsMatches(h string) bool {
	if c == nil {
		return false
	}
	if c.exact[h] {
		return true
	}
	candidates := c.wild
	if Wildcard(h) {
		candidates = c.all
	}
	for _, o := range candidates {
		if hostsMatch(h, o) {
			return true
		}
	}
	return false
}

// ImportsService reports whether the hosts import svc: not excluded in its
// namespace nor in "*", and named in its namespace or in "*".
func (e EgressHosts) ImportsService(svc *Service) bool {
	own, any := e.byNamespace[svc.Namespace], e.byNamespace["*"]
	if own.excludes(svc.Hostname) || any.excludes(svc.Hostname) {
		return false
	}
	return own.matches(svc.Hostname) || any.matches(svc.Hostname)
}

// ImportsVirtualService reports whether the hosts import a VirtualService
// of namespace vsNamespace with hosts (FQDNs): one of its hosts is named
// in its namespace or in "*", and not excluded there.
func (e EgressHosts) ImportsVirtualService(vsNamespace string, hosts []string) bool {
	own, any := e.byNamespace[vsNamespace], e.byNamespace["*"]
	for _, h := range hosts {
		for _, c := range []*egressClass{own, any} {
			if c.vsMatches(h) && !own.excludes(h) && !any.excludes(h) {
				return true
			}
		}
	}
	return false
}

// MaxSidecarHosts bounds the egress hosts of one Sidecar, all listeners
// together: every proxy it configures matches every service against them.
// The webhook refuses more; of a Sidecar it did not see, the hosts past
// the bound are not read (OverLimit), so that it imports less, not more.
const MaxSidecarHosts = 1024

// EgressListeners are the Sidecar's egress listeners as Istio reads them:
// one catch-all listener importing "*/*" when it lists none (or for a nil
// Sidecar). Hosts past MaxSidecarHosts are left out.
func (c *Sidecar) EgressListeners() []*networkingv1.IstioEgressListener {
	eg := c.GetSpec().GetEgress()
	if len(eg) == 0 {
		return []*networkingv1.IstioEgressListener{{Hosts: []string{"*/*"}}}
	}
	if !c.OverLimit() {
		return eg
	}
	out := make([]*networkingv1.IstioEgressListener, 0, len(eg))
	left := MaxSidecarHosts
	for _, l := range eg {
		cp := proto.CloneOf(l)
		cp.Hosts = cp.Hosts[:min(len(cp.Hosts), left)]
		left -= len(cp.Hosts)
		out = append(out, cp)
	}
	return out
}

// OverLimit reports whether the Sidecar has more than MaxSidecarHosts
// egress hosts.
func (c *Sidecar) OverLimit() bool {
	n := 0
	for _, l := range c.GetSpec().GetEgress() {
		n += len(l.GetHosts())
	}
	return n > MaxSidecarHosts
}

// GetSpec returns the Sidecar's spec; nil for a nil Sidecar.
func (c *Sidecar) GetSpec() *networkingv1.Sidecar {
	if c == nil {
		return nil
	}
	return c.Spec
}

// RegistryOnly is the Sidecar's outboundTrafficPolicy, when it sets one:
// whether destinations outside the registry are refused (REGISTRY_ONLY)
// rather than passed through (ALLOW_ANY). set is false when the mesh's
// policy applies.
func (c *Sidecar) RegistryOnly() (registryOnly, set bool) {
	p := c.GetSpec().GetOutboundTrafficPolicy()
	if p == nil {
		return false, false
	}
	return p.GetMode() == networkingv1.OutboundTrafficPolicy_REGISTRY_ONLY, true
}

// Imports reports whether one of the Sidecar's egress listeners imports
// svc (some port of it) for the proxies of namespace.
func (c *Sidecar) Imports(svc *Service, namespace string) bool {
	for _, l := range c.EgressListeners() {
		if !ParseEgressHosts(l.GetHosts(), namespace).ImportsService(svc) {
			continue
		}
		if n := l.GetPort().GetNumber(); n == 0 || slices.ContainsFunc(svc.Ports, func(p Port) bool { return p.Port == n }) {
			return true
		}
	}
	return false
}
