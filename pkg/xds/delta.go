package xds

import (
	"slices"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// deltaWatch is an open incremental request waiting for a response.
type deltaWatch struct {
	req *cache.DeltaRequest
	sub cache.Subscription
	ch  chan cache.DeltaResponse
}

// CreateDeltaWatch implements cache.ConfigWatcher for incremental xDS.
func (s *Server) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	p, serve, err := s.watcher(req.GetNode(), req.GetTypeUrl())
	if !serve {
		return func() {}, err
	}
	return p.openDelta(req.GetTypeUrl(), &deltaWatch{req: req, sub: sub, ch: ch}), nil
}

func (p *proxy) openDelta(typeURL string, w *deltaWatch) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deltaWatches[typeURL] = w
	p.respondDeltaLocked(typeURL, w, p.srv.state.Load())
	return func() {
		p.mu.Lock()
		if p.deltaWatches[typeURL] == w {
			delete(p.deltaWatches, typeURL)
		}
		p.mu.Unlock()
	}
}

// respondDeltaLocked sends the resources whose version differs from what
// the client holds, and the names it holds that are gone. The client's
// holdings are what it was sent, acknowledged or not, so a NACKed version
// is not sent again until it changes.
func (p *proxy) respondDeltaLocked(typeURL string, w *deltaWatch, st *pushState) {
	start := p.srv.cfg.Clock()
	r := p.responseLocked(st, typeURL, subscriptionOf(w.sub))
	held := heldOf(w.sub.ReturnedResources(), p.deltaHeld[typeURL])
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL}
	size := 0
	for _, b := range r.gen {
		if v, _ := held.version(b.name); v != b.hash {
			resp.Resources = append(resp.Resources, &discovery.Resource{Name: b.name, Version: b.hash, Resource: b.any})
			size += len(b.any.Value)
		}
	}
	held.each(func(name string) {
		if _, ok := r.versions[name]; !ok {
			resp.RemovedResources = append(resp.RemovedResources, name)
		}
	})
	slices.Sort(resp.RemovedResources)
	first := !p.deltaAnswered[typeURL] && w.sub.IsWildcard()
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 && !first {
		return
	}
	resp.SystemVersionInfo = st.snap.Version
	// The client now holds r's versions: the proxies sent r share them,
	// and go-control-plane's record of the stream starts empty again.
	select {
	case w.ch <- &cache.DeltaPassthroughResponse{DeltaRequest: w.req, NextVersionMap: map[string]string{}, DeltaDiscoveryResponse: resp}:
	default:
		p.srv.log.Error("response channel full; retrying on the next push", "node", p.node.GetId(), "type", shortType(typeURL))
		return
	}
	p.deltaHeld[typeURL] = &deltaHeld{versions: r.versions}
	p.deltaAnswered[typeURL] = true
	delete(p.deltaWatches, typeURL)
	p.pending[typeURL] = sent{changedAt: st.changedAt}
	p.srv.metrics.observe(typeURL, p.srv.cfg.Clock().Sub(start), size)
}

// deltaHeld is what an incremental stream holds of one type, besides what
// go-control-plane records of it (the subscription's ReturnedResources:
// versions a reconnecting client announces, and "" where an unsubscribe
// from a wildcard asks for a resource again): the versions of the response
// last sent, which every proxy sent it shares, less the names unsubscribed
// since. A thousand sidecars of one scope hold one set of versions, not a
// thousand copies.
type deltaHeld struct {
	versions map[string]string // the response's; read-only
	dropped  map[string]bool   // names of versions unsubscribed since
}

// drop records that the client unsubscribed from names.
func (h *deltaHeld) drop(names []string) {
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

// unsubscribed records names a Delta request unsubscribes typeURL from,
// before go-control-plane applies the request.
func (p *proxy) unsubscribed(typeURL string, names []string) {
	if len(names) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.deltaHeld[typeURL]; h != nil {
		h.drop(names)
	}
}

// respondedDelta records an incremental response the stream is sending.
func (p *proxy) respondedDelta(resp *discovery.DeltaDiscoveryResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pending[resp.GetTypeUrl()]
	delete(p.pending, resp.GetTypeUrl())
	s.version, s.nonce = resp.GetSystemVersionInfo(), resp.GetNonce()
	p.sent[resp.GetTypeUrl()] = s
}
