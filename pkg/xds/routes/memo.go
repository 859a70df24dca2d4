package routes

import (
	"maps"
	"slices"
	"strings"
	"sync"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// Memo keeps the HTTP routes each VirtualService translated to on a
// gateway server, and their wire form, for the snapshots that follow: a
// VirtualService that did not change (the same object, as the model
// source keeps what no event named) is translated again only when
// something its translation read differs in the new snapshot — the
// mesh domain, the options, the ports of a service it routes to without
// naming a port, the DestinationRule of a destination. A push after one
// VirtualService changed then translates that one, not all. Memo holds
// what the last two snapshots asked for (the one being pushed and the
// one before, which proxies still catching up generate from). The zero
// value is ready; a nil *Memo remembers nothing.
type Memo struct {
	mu    sync.Mutex
	snaps [memoSnapshots]*model.Snapshot // newest last
	slots [memoSnapshots]*memoSlot
	// rs are the verdicts on the regexes of the translations made
	// through the memo.
	rs regexes
}

const memoSnapshots = 2

// memoSlotHint is how many translations a snapshot's memo has room for
// when made.
const memoSlotHint = 64

type memoSlot struct {
	entries map[memoKey]*memoEntry
	raw     map[*routev3.Route][]byte
	// bytes are the wire form's of the entries' routes.
	bytes int
	// vss is how many VirtualServices the snapshot has.
	vss int
	// known are the snapshot's VirtualServices, once asked for: a
	// VirtualService made for one translation (a root with its
	// delegates expanded) is never kept, as no later one asks for it.
	known map[*model.VirtualService]bool
}

// memoKey is a VirtualService translated in one scope, in one form.
type memoKey struct {
	vs      *model.VirtualService
	gateway string
	port    uint32
	tls     bool
	proxyNs string
	labels  string
	form    form
}

// memoEntry is a translation and what it read of its snapshot.
type memoEntry struct {
	domain string
	retry  *networkingv1.HTTPRetry
	deps   reads
	// routes are the translation's messages (nil when written straight
	// to wire form), raw their wire form (a nil route: it does not
	// encode), built the two together.
	routes []*routev3.Route
	raw    [][]byte
	built  []builtRoute
	err    error
}

// reads are what a translation read of its snapshot beyond the
// VirtualService: the single port of a service a destination without a
// port went to (0: none, or not exactly one), the DestinationRule of a
// destination's host.
type reads struct {
	ports []portRead
	rules []ruleRead
}

type portRead struct {
	host string
	port uint32
}

type ruleRead struct {
	host string
	rule *model.DestinationRule
}

// readRule reports whether r holds the DestinationRule of host already
// (looking through the first rulesScanned only: past them, a host read
// twice is held twice, which costs holds a look more).
func (r *reads) readRule(host string) bool {
	return slices.ContainsFunc(r.rules[:min(len(r.rules), rulesScanned)], func(d ruleRead) bool { return d.host == host })
}

// rulesScanned is how many DestinationRule reads readRule looks through.
const rulesScanned = 16

func singlePort(snap *model.Snapshot, host string) uint32 {
	if svc := snap.Service(host); svc != nil && len(svc.Ports) == 1 {
		return svc.Ports[0].Port
	}
	return 0
}

func ruleFor(snap *model.Snapshot, host string, proxy Proxy) *model.DestinationRule {
	if len(snap.Resources().DestinationRules) == 0 {
		return nil
	}
	return snap.DestinationRuleFor(host, proxy.Namespace, proxy.Labels)
}

// holds reports whether snap gives what r read.
func (r *reads) holds(snap *model.Snapshot, proxy Proxy) bool {
	for _, p := range r.ports {
		if singlePort(snap, p.host) != p.port {
			return false
		}
	}
	for _, d := range r.rules {
		if ruleFor(snap, d.host, proxy) != d.rule {
			return false
		}
	}
	return true
}

// slot returns the slot of snap, making it the newest (and forgetting
// the oldest) when it is not kept, and the other kept slot. m.mu is held.
func (m *Memo) slot(snap *model.Snapshot) (cur, other *memoSlot) {
	for i, s := range m.snaps {
		if s == snap && m.slots[i] != nil {
			return m.slots[i], m.slots[1-i]
		}
	}
	m.snaps[0], m.slots[0] = m.snaps[1], m.slots[1]
	// Not sized for every VirtualService of the mesh: a proxy whose
	// Sidecar imports a few asks for those few, and the map grows as
	// translations are added.
	n := len(snap.Resources().VirtualServices)
	m.snaps[1], m.slots[1] = snap, &memoSlot{entries: make(map[memoKey]*memoEntry, min(n, memoSlotHint)), vss: n}
	return m.slots[1], m.slots[0]
}

// lookup returns the translation of k in snap, from snap's own or, when
// what it read holds in snap, the other kept snapshot's.
func (m *Memo) lookup(snap *model.Snapshot, k memoKey, retry *networkingv1.HTTPRetry, proxy Proxy) *memoEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, other := m.slot(snap)
	if e, ok := cur.entries[k]; ok {
		return e
	}
	if other == nil {
		return nil
	}
	e, ok := other.entries[k]
	if !ok || e.domain != snap.Options.Domain || e.retry != retry || !e.deps.holds(snap, proxy) {
		return nil
	}
	cur.add(k, e)
	return e
}

// store keeps e as the translation of k in snap, unless the snapshot's
// translations already hold memoBudget bytes of routes (memoSlot.add).
func (m *Memo) store(snap *model.Snapshot, k memoKey, e *memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, _ := m.slot(snap)
	cur.add(k, e)
}

// memoBudget bounds the wire form of the routes one snapshot's slot
// keeps (their messages take a few times more): what is past it is
// translated on each push, as without a memo.
const memoBudget = 32 << 20

func (s *memoSlot) add(k memoKey, e *memoEntry) {
	size := 0
	for _, r := range e.raw {
		size += len(r)
	}
	if s.bytes+size > memoBudget {
		return
	}
	s.bytes += size
	s.entries[k] = e
	if e.routes == nil {
		return
	}
	if s.raw == nil {
		// Sized for a first push of translations into messages.
		s.raw = make(map[*routev3.Route][]byte, 3*s.vss)
	}
	for _, r := range e.built {
		if r.raw != nil {
			s.raw[r.msg] = r.raw
		}
	}
}

// Encoded returns, for the routes translated for snap, their wire form
// (nil for a route it does not know).
func (m *Memo) Encoded(snap *model.Snapshot) func(*routev3.Route) []byte {
	if m == nil {
		return func(*routev3.Route) []byte { return nil }
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var raw map[*routev3.Route][]byte
	for i, s := range m.snaps {
		if s == snap && m.slots[i] != nil {
			raw = m.slots[i].raw
		}
	}
	return func(r *routev3.Route) []byte {
		m.mu.Lock()
		defer m.mu.Unlock()
		return raw[r]
	}
}

// memoizable reports whether vs's translation reads only what memoEntry
// records: a VirtualService delegating rules reads its delegates too.
func memoizable(vs *model.VirtualService) bool {
	for _, r := range vs.Spec.GetHttp() {
		if r.GetDelegate() != nil {
			return false
		}
	}
	return true
}

// labelsKey is labels as part of a memo key.
func labelsKey(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// memoRoutes is the translation of vs in scope, in form f, through m:
// remembered, or translated and remembered.
func (o Options) memoRoutes(m *Memo, snap *model.Snapshot, vs *model.VirtualService, scope Scope, labels string, rs *regexes, f form) *memoEntry {
	k := memoKey{vs: vs, gateway: scope.Gateway, port: scope.Port, tls: scope.TLS, proxyNs: scope.Proxy.Namespace, labels: labels, form: f}
	if e := m.lookup(snap, k, o.DefaultRetry, scope.Proxy); e != nil {
		return e
	}
	e := o.buildRoutes(snap, vs, scope, rs, f, true)
	e.domain, e.retry = snap.Options.Domain, o.DefaultRetry
	m.store(snap, k, e)
	return e
}

// MemoHTTPRoutes is HTTPRoutes of vs in scope, through m (nil: none
// kept): the translation of vs in the same scope (listener port,
// gateway, the proxy's namespace and, when a match of vs selects
// clients by their labels or a DestinationRule selects clients, the
// proxy's labels) kept from snap or from the snapshot before when what
// it read holds in snap; else translated, encoded and kept. The
// sidecars of a namespace then share one translation of each
// VirtualService, and the push after one VirtualService changed
// translates that one. What it returns is shared: not to be changed.
func (o Options) MemoHTTPRoutes(m *Memo, snap *model.Snapshot, vs *model.VirtualService, scope Scope) ([]*routev3.Route, error) {
	if m == nil {
		return o.httpRoutes(snap, vs, scope, nil)
	}
	if scope.every || scope.Proxy.AnySource || !memoizable(vs) || !m.known(snap, vs) {
		return o.httpRoutes(snap, vs, scope, &m.rs)
	}
	e := o.memoRoutes(m, snap, vs, scope, scopeLabels(snap, vs, scope), &m.rs, messagesAndWire)
	return e.routes, e.err
}

// MemoWireRoutes is MemoHTTPRoutes with the routes in wire form, as
// MarshalRoute writes them: written straight to wire form where
// wireTranslate can, else translated and encoded (a VirtualService
// whose routes do not encode is then refused). What it returns is
// shared: not to be changed.
func (o Options) MemoWireRoutes(m *Memo, snap *model.Snapshot, vs *model.VirtualService, scope Scope) ([][]byte, error) {
	var e *memoEntry
	if m == nil || scope.every || scope.Proxy.AnySource || !memoizable(vs) || !m.known(snap, vs) {
		var rs *regexes
		if m != nil {
			rs = &m.rs
		}
		e = o.buildRoutes(snap, vs, scope, rs, wireForm, false)
	} else {
		e = o.memoRoutes(m, snap, vs, scope, scopeLabels(snap, vs, scope), &m.rs, wireForm)
	}
	return e.raw, e.err
}

// scopeLabels are the proxy's labels as part of a memo key, when the
// translation of vs reads them: a match of vs selects clients by their
// labels, or a DestinationRule selects clients.
func scopeLabels(snap *model.Snapshot, vs *model.VirtualService, scope Scope) string {
	if selectsClients(vs) || snap.SelectsClients() {
		return labelsKey(scope.Proxy.Labels)
	}
	return ""
}

// known reports whether vs is one of snap's VirtualServices.
func (m *Memo) known(snap *model.Snapshot, vs *model.VirtualService) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, _ := m.slot(snap)
	if cur.known == nil {
		cur.known = make(map[*model.VirtualService]bool, len(snap.Resources().VirtualServices))
		for _, v := range snap.Resources().VirtualServices {
			cur.known[v] = true
		}
	}
	return cur.known[vs]
}

// selectsClients reports whether a match of vs selects clients by their
// labels.
func selectsClients(vs *model.VirtualService) bool {
	for _, r := range vs.Spec.GetHttp() {
		for _, m := range r.GetMatch() {
			if len(m.GetSourceLabels()) > 0 {
				return true
			}
		}
	}
	return false
}
