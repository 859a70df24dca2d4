package xds

import (
	"slices"

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
	if slices.Contains(subscribe, "*") {
		d.wildcard = true
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
	p.respondDeltaLocked(typeURL, d, p.srv.state.Load())
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
	r := p.responseLocked(st, typeURL, d.names.subscription(d.wildcard))
	held := heldOf(d.recorded, d.held)
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL}
	n, size := selectDelta(resp, r, held, st)
	held.each(func(name string) {
		if _, ok := r.versions[name]; !ok {
			resp.RemovedResources = append(resp.RemovedResources, name)
		}
	})
	slices.Sort(resp.RemovedResources)
	first := !d.answered && d.wildcard
	if n == 0 && len(resp.RemovedResources) == 0 && !first {
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
	// The client now holds r's versions: the proxies sent r share them.
	d.held = &deltaHeld{versions: r.versions}
	d.recorded = nil
	d.answered = true
	d.open = false
	p.pending[typeURL] = sent{bundle: r.bundle(typeURL), changedAt: st.changedAt}
	p.srv.metrics.observe(typeURL, p.srv.cfg.Clock().Sub(start), size)
}

// selectDelta sets as resp's resources those of r whose version
// differs from what the client holds, already encoded as unknown fields
// (see the codec): all of them, the usual first response, share r's
// encoding; a few, the usual push, are copied. It returns how many, and
// their size.
func selectDelta(resp *discovery.DeltaDiscoveryResponse, r *response, held held, st *pushState) (n, size int) {
	encoded, ends := r.deltaEncoded(st)
	var (
		sel     []byte // the resources sent, once one is left out
		skipped bool
		start   int
	)
	for i, g := range r.gen {
		from := start
		start = ends[i]
		if v, _ := held.version(g.name); v == g.hash {
			if !skipped {
				skipped = true
				sel = append(sel, encoded[:from]...) // every one before it is sent
			}
			continue
		}
		n++
		size += len(g.any.GetValue())
		if skipped {
			sel = append(sel, encoded[from:start]...)
		}
	}
	if !skipped {
		sel = encoded
	}
	if n > 0 {
		resp.ProtoReflect().SetUnknown(sel)
	}
	return n, size
}

// deltaHeld is the versions of the response last sent, which every proxy
// sent it shares, less the names unsubscribed since. A thousand sidecars
// of one scope hold one set of versions, not a thousand copies.
type deltaHeld struct {
	versions map[string]string // the response's; read-only
	dropped  map[string]bool   // names of versions unsubscribed since
}

// drop records that the client unsubscribed from names; h may be nil.
func (h *deltaHeld) drop(names []string) {
	if h == nil {
		return
	}
	for _, n := range names {
		if _, ok := h.versions[n]; !ok {
			continue // only names of versions: bounded by them
		}
		if h.dropped == nil {
			h.dropped = map[string]bool{}
		}
		h.dropped[n] = true
	}
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
	if h.last == nil || h.last.dropped[name] {
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
	for name := range h.last.versions {
		if _, ok := h.recorded[name]; !ok && !h.last.dropped[name] {
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
