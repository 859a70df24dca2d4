package xds

import (
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deltaState is what an incremental stream asks for and holds of one type.
type deltaState struct {
	// What the client subscribes to. legacy: no request has named a
	// resource yet, so an empty first request keeps meaning wildcard
	// (Envoy's CDS and LDS).
	names    *nameSet // explicitly subscribed; interned
	wildcard bool
	legacy   bool
	// recorded is the versions the client announced when it (re)connected,
	// and "" where an unsubscribe from a wildcard asks for a resource
	// again; cleared by the next response, usually nil.
	recorded map[string]string
	held     *deltaHeld // what the last response left the client holding
	answered bool       // a response was sent
	open     bool       // a request awaits its response
	// basis is the push and scope held was last brought up to date with;
	// added, the names subscribed to since; reshaped, whether the
	// subscription changed otherwise (wildcard on or off), which needs a
	// full answer.
	basis    basis
	added    []string
	reshaped bool
}

func newDeltaState(req *discovery.DeltaDiscoveryRequest) *deltaState {
	empty := len(req.GetResourceNamesSubscribe()) == 0
	return &deltaState{wildcard: empty, legacy: true, recorded: req.GetInitialResourceVersions()}
}

// update applies a request's subscriptions, then its unsubscriptions, as
// Envoy's xDS protocol defines them. A client may subscribe to
// DefaultMaxNames names of a type at most.
func (d *deltaState) update(sets *nameSets, subscribe, unsubscribe []string) error {
	if d.legacy {
		if len(subscribe) == 0 {
			return nil // still wildcard by the legacy rule
		}
		d.legacy = false // still wildcard until "*" is unsubscribed
	}
	wasWildcard := d.wildcard
	defer func() { d.reshaped = d.reshaped || d.wildcard != wasWildcard }()
	if slices.Contains(subscribe, "*") {
		d.wildcard = true
	}
	for _, n := range subscribe {
		if n != "*" && !d.names.contains(n) {
			d.added = append(d.added, n)
		}
	}
	names := sets.update(d.names, subscribe, nil)
	var gone map[string]bool // a name unsubscribed twice is not held the second time
	for _, n := range unsubscribe {
		if n == "*" {
			d.wildcard = false
			continue
		}
		if d.wildcard && names.contains(n) && !gone[n] {
			// Still sent by the wildcard: the client must be told whether
			// the resource exists, so it is sent again (or removed).
			if d.recorded == nil {
				d.recorded = map[string]string{}
			}
			d.recorded[n] = ""
		} else {
			delete(d.recorded, n)
		}
		if gone == nil {
			gone = map[string]bool{}
		}
		gone[n] = true
	}
	d.held.drop(unsubscribe)
	d.names = sets.update(names, nil, unsubscribe)
	if d.names != nil && len(d.names.names) > DefaultMaxNames {
		return status.Errorf(codes.InvalidArgument, "subscribed to more than %d resource names", DefaultMaxNames)
	}
	return nil
}

// deltaRequest applies an incremental request for typeURL and answers it
// if the client lacks something.
func (p *proxy) deltaRequest(typeURL string, req *discovery.DeltaDiscoveryRequest) error {
	if err := p.applyDeltaRequest(typeURL, req); err != nil {
		return err
	}
	if typeURL == typeSecret {
		p.refreshSecrets() // generated without p.mu
	}
	return nil
}

// applyDeltaRequest is deltaRequest but for the answer to a Secret
// request.
func (p *proxy) applyDeltaRequest(typeURL string, req *discovery.DeltaDiscoveryRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.delta[typeURL]
	if d == nil {
		d = newDeltaState(req)
		p.delta[typeURL] = d
	}
	if err := d.update(&p.srv.names, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()); err != nil {
		return err
	}
	d.open = true
	if typeURL == typeSecret {
		return nil
	}
	p.respondDeltaLocked(typeURL, d, p.srv.state.Load())
	if typeURL == typeEndpoint {
		p.endpointsAskedLocked()
	}
	return nil
}

// respondDeltaLocked queues, if a request awaits it, the resources whose
// version differs from what the client holds, and the names it holds that
// are gone. The client's holdings are what it was sent, acknowledged or
// not, so a NACKed version is not sent again until it changes.
func (p *proxy) respondDeltaLocked(typeURL string, d *deltaState, st *pushState) {
	if !d.open {
		return
	}
	start := p.srv.cfg.Clock()
	if generatedType(typeURL) {
		p.rescopeLocked(st)
		if p.respondDeltaChangesLocked(typeURL, d, st, start) {
			return
		}
	}
	r := p.responseLocked(st, typeURL, d.names.subscription(d.wildcard))
	held := heldOf(d.recorded, d.held)
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL}
	n, size := selectDelta(resp, r, held)
	held.each(func(name string) {
		if _, ok := r.versions[name]; !ok {
			resp.RemovedResources = append(resp.RemovedResources, name)
		}
	})
	slices.Sort(resp.RemovedResources)
	first := !d.answered && d.wildcard
	if n == 0 && len(resp.RemovedResources) == 0 && !first {
		d.upToDate(p, st)
		return
	}
	resp.SystemVersionInfo = st.snap.Version
	// At most one response per type is queued, so this never blocks; if
	// it would, the request stays open and the next push retries rather
	// than stalling every proxy.
	select {
	case p.deltaOut <- resp:
	default:
		p.srv.log.Error("response queue full; retrying on the next push", "node", p.node.GetId(), "type", shortType(typeURL))
		return
	}
	var clusters []string
	if typeURL == typeCluster {
		for _, g := range r.gen {
			if v, _ := held.version(g.name); v != g.hash {
				clusters = append(clusters, g.name)
			}
		}
	}
	// The client now holds r's versions: the proxies sent r share them.
	base := r.heldBase(&p.srv.helds)
	d.held = &deltaHeld{base: base, versions: base.versions}
	d.recorded = nil
	d.answered = true
	d.upToDate(p, st)
	p.queuedDeltaLocked(typeURL, d, st, start, size, r.bundle(typeURL))
	p.clustersSentLocked(st, clusters)
}

// queuedDeltaLocked records that a response of typeURL is queued.
func (p *proxy) queuedDeltaLocked(typeURL string, d *deltaState, st *pushState, start time.Time, size int, bundle string) {
	d.open = false
	p.pending[typeURL] = sent{bundle: bundle, changedAt: st.changedAt}
	p.srv.metrics.observe(typeURL, p.srv.cfg.Clock().Sub(start), size)
}

// upToDate records that the client holds what st gives it.
func (d *deltaState) upToDate(p *proxy, st *pushState) {
	d.basis = basis{seq: st.seq, scope: p.scopeKey, set: true}
	d.added, d.reshaped = nil, false
}

// respondDeltaChangesLocked answers from the client's basis when only
// endpoints changed since and the client subscribed to names, not to
// anything else: with the load assignments of the changed services it
// subscribes to, and the resources of the names added, those whose
// version differs from what it holds. It reports false when the client
// must be answered in full.
func (p *proxy) respondDeltaChangesLocked(typeURL string, d *deltaState, st *pushState, start time.Time) bool {
	if !d.answered || d.recorded != nil || d.reshaped || d.held.overgrown() {
		return false
	}
	c, ok := p.srv.changesSince(st, d.basis, p.scopeKey)
	if !ok || (d.wildcard && (len(d.added) > 0 || typeURL == typeEndpoint || !p.wl.Envoy)) || st.fullAfter(p, typeURL, c, d.basis.seq) {
		return false
	}
	// A wildcard subscription's names are those it holds.
	k, names := affectedKey{names: d.names, from: d.basis.seq}, d.names.all
	if d.wildcard {
		k.names, names = d.held.names()
	}
	want, key := st.changedNames(p, typeURL, c, k, names, d.wildcard)
	if len(d.added) > 0 {
		want, key = slices.Clone(want), ""
		for _, n := range d.added {
			if d.names.contains(n) {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		want = slices.Compact(want)
	}
	if len(want) == 0 {
		d.upToDate(p, st)
		return true
	}
	if key == "" {
		key = namesKey(want)
	}
	r := st.response(p.srv, p.scopeGen, sharedKey{typeURL: typeURL, proxy: p.shareKey(typeURL), names: key}, want)
	held := heldOf(nil, d.held)
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL}
	n, size := selectDelta(resp, r, held)
	for _, name := range want {
		if _, ok := r.versions[name]; !ok {
			if _, ok := held.version(name); ok {
				resp.RemovedResources = append(resp.RemovedResources, name)
			}
		}
	}
	if n == 0 && len(resp.RemovedResources) == 0 {
		d.upToDate(p, st)
		return true
	}
	resp.SystemVersionInfo = st.snap.Version
	select {
	case p.deltaOut <- resp:
	default:
		p.srv.log.Error("response queue full; retrying on the next push", "node", p.node.GetId(), "type", shortType(typeURL))
		return true
	}
	if d.held == nil {
		d.held = &deltaHeld{}
	}
	var clusters []string
	for _, g := range r.gen {
		if v, _ := held.version(g.name); v != g.hash && typeURL == typeCluster {
			clusters = append(clusters, g.name)
		}
		d.held.set(g.name, g.hash)
	}
	d.held.drop(resp.RemovedResources)
	d.upToDate(p, st)
	p.queuedDeltaLocked(typeURL, d, st, start, size, "")
	p.clustersSentLocked(st, clusters)
	return true
}

// selectDelta sets as resp's resources those of r whose version
// differs from what the client holds. It returns how many, and their
// size. Resources built for the push state are shared by every response
// that sends them, and the codec references their bytes: what a response
// adds to memory is a pointer per resource, for as long as it is sent,
// and none when it sends all of r, as most answers to a change do.
func selectDelta(resp *discovery.DeltaDiscoveryResponse, r *response, held held) (n, size int) {
	var sel []*discovery.Resource
	for i, g := range r.gen {
		if v, _ := held.version(g.name); v == g.hash {
			if sel == nil {
				sel = append(make([]*discovery.Resource, 0, len(r.gen)), r.deltaResources()[:i]...)
			}
			continue
		}
		if sel != nil {
			sel = append(sel, g.resource())
		}
		size += len(g.any.GetValue())
	}
	if sel == nil {
		sel = r.deltaResources()
	}
	if len(sel) > 0 {
		resp.Resources = sel
	}
	return len(sel), size
}

// deltaHeld is the versions of the last full response sent, which every
// proxy sent it shares, with the versions sent since by answers to
// changes, less the names unsubscribed or removed since. A thousand
// sidecars of one scope hold one set of versions, not a thousand copies,
// and each its own few changes.
type deltaHeld struct {
	base     *heldBase         // the response's names and versions; read-only
	versions map[string]string // base's
	over     map[string]string // versions sent since, which replace the response's
	dropped  map[string]bool   // names of versions no longer held
}

// set records that the client was sent version of name.
func (h *deltaHeld) set(name, version string) {
	if v, ok := h.versions[name]; ok && v == version && !h.dropped[name] {
		delete(h.over, name)
		return
	}
	if h.over == nil {
		h.over = map[string]string{}
	}
	h.over[name] = version
	delete(h.dropped, name)
}

// drop records that the client no longer holds names; h may be nil.
func (h *deltaHeld) drop(names []string) {
	if h == nil {
		return
	}
	for _, n := range names {
		delete(h.over, n)
		if _, ok := h.versions[n]; !ok {
			continue // only names of versions: bounded by them
		}
		if h.dropped == nil {
			h.dropped = map[string]bool{}
		}
		h.dropped[n] = true
	}
}

// names returns the names h holds, and what identifies them: the
// response's when they are its names, which every client sent it
// shares; h may be nil.
func (h *deltaHeld) names() (id any, names func(yield func(string) bool)) {
	if h != nil && h.base != nil && len(h.over) == 0 && len(h.dropped) == 0 {
		return h.base, slices.Values(h.base.names)
	}
	return h, func(yield func(string) bool) {
		heldOf(nil, h).each(func(name string) { _ = yield(name) })
	}
}

// overgrown reports whether the versions sent since the last full
// response have grown past what sharing it saves: the client is then
// answered in full, which gives it a shared set again.
func (h *deltaHeld) overgrown() bool {
	return h != nil && len(h.over) > max(64, len(h.versions)/4)
}

// held is the version of each resource a client holds: recorded, else
// from the response last sent.
type held struct {
	recorded map[string]string
	last     *deltaHeld
}

func heldOf(recorded map[string]string, last *deltaHeld) held { return held{recorded, last} }

func (h held) version(name string) (string, bool) {
	if v, ok := h.recorded[name]; ok {
		return v, true
	}
	if h.last == nil {
		return "", false
	}
	if v, ok := h.last.over[name]; ok {
		return v, true
	}
	if h.last.dropped[name] {
		return "", false
	}
	v, ok := h.last.versions[name]
	return v, ok
}

// each calls fn with every name held, once.
func (h held) each(fn func(name string)) {
	for name := range h.recorded {
		fn(name)
	}
	if h.last == nil {
		return
	}
	for name := range h.last.over {
		if _, ok := h.recorded[name]; !ok {
			fn(name)
		}
	}
	for name := range h.last.versions {
		_, recorded := h.recorded[name]
		_, over := h.last.over[name]
		if !recorded && !over && !h.last.dropped[name] {
			fn(name)
		}
	}
}

// respondedDelta records an incremental response the stream is sending.
func (p *proxy) respondedDelta(resp *discovery.DeltaDiscoveryResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pending[resp.GetTypeUrl()]
	delete(p.pending, resp.GetTypeUrl())
	s.version, s.nonce, s.at = resp.GetSystemVersionInfo(), resp.GetNonce(), p.srv.cfg.Clock()
	p.sent[resp.GetTypeUrl()] = s
}
