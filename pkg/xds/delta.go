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
	held := w.sub.ReturnedResources()
	next := make(map[string]string, len(r.gen))
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL}
	size := 0
	for _, b := range r.gen {
		next[b.name] = b.hash
		if held[b.name] != b.hash {
			resp.Resources = append(resp.Resources, &discovery.Resource{Name: b.name, Version: b.hash, Resource: b.any})
			size += len(b.any.Value)
		}
	}
	for name := range held {
		if _, ok := next[name]; !ok {
			resp.RemovedResources = append(resp.RemovedResources, name)
		}
	}
	slices.Sort(resp.RemovedResources)
	first := !p.deltaAnswered[typeURL] && w.sub.IsWildcard()
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 && !first {
		return
	}
	resp.SystemVersionInfo = st.snap.Version
	select {
	case w.ch <- &cache.DeltaPassthroughResponse{DeltaRequest: w.req, NextVersionMap: next, DeltaDiscoveryResponse: resp}:
	default:
		p.srv.log.Error("response channel full; retrying on the next push", "node", p.node.GetId(), "type", shortType(typeURL))
		return
	}
	p.deltaAnswered[typeURL] = true
	delete(p.deltaWatches, typeURL)
	p.pending[typeURL] = sent{changedAt: st.changedAt}
	p.srv.metrics.observe(typeURL, p.srv.cfg.Clock().Sub(start), size)
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
