package xds

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/generation"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// proxy is the state of one ADS stream.
type proxy struct {
	srv      *Server
	streamID int64
	ctx      context.Context // the stream's, for authentication

	// secretMu is held while the stream's secrets are generated and
	// answered (refreshSecrets); taken before mu, never while holding it.
	secretMu sync.Mutex

	mu     sync.Mutex
	closed bool               // the stream ended
	node   *core.Node         // the authenticated first node; nil before
	wl     *identity.Workload // set with node
	sp     sds.Proxy          // for secrets
	// secretWatch reports changes of the secrets the stream asks for;
	// ready is what refreshSecrets generated, while it answers.
	secretWatch *sds.Watch
	ready       readySecrets
	// The generation scope of wl in scopeSnap, the last snapshot asked,
	// under the mesh configuration scopeMesh.
	scopeSnap *model.Snapshot
	scopeSeq  uint64 // scopeSnap's push state's
	scopeMesh *generation.Mesh
	scopeKey  string
	scopeGen  generation.Func
	// endpointsKey is scopeKey, or the wider key under which load
	// assignments are shared (shareKey).
	endpointsKey string
	watches      map[string]*watch
	subs         map[string]subscription // from the last request that was not stale
	last         map[string]lastResponse // state of the world: the response last computed, by type URL
	pending      map[string]sent         // enqueued, by version
	sent         map[string]sent         // last sent, by type URL
	acked        map[string]string
	nacked       map[string]string
	warm         warming // listeners and routes held back
	// bundleAcked is the content hash of the last trust bundle (PCDS) the
	// proxy ACKed.
	bundleAcked string
	debug       *debug.Caller // set with node for a debug client, which is no proxy

	delta    map[string]*deltaState                 // incremental streams, by type URL
	deltaOut chan *discovery.DeltaDiscoveryResponse // responses queued; incremental streams
}

// watch is an open request waiting for a response.
type watch struct {
	req *cache.Request
	sub cache.Subscription
	ch  chan cache.Response
}

// subscription is what a proxy asked for of one type.
type subscription struct {
	names    []string // sorted
	key      string   // namesKey(names)
	wildcard bool
}

// sent is a response handed to the stream.
type sent struct {
	version   string
	bundle    string // the trust bundle's content hash, for PCDS
	nonce     string
	changedAt time.Time
	at        time.Time // when it was handed to the stream
}

func newProxy(srv *Server, id int64, delta bool) *proxy {
	p := &proxy{
		srv: srv, streamID: id,
		watches: map[string]*watch{}, subs: map[string]subscription{}, last: map[string]lastResponse{}, pending: map[string]sent{}, sent: map[string]sent{},
		acked: map[string]string{}, nacked: map[string]string{},
	}
	if delta {
		p.delta = map[string]*deltaState{}
		p.deltaOut = make(chan *discovery.DeltaDiscoveryResponse, deltaOutCap)
	}
	return p
}

// open registers w and answers it at once if the proxy lacks something.
func (p *proxy) open(typeURL string, w *watch) func() {
	p.mu.Lock()
	nonce := w.req.GetResponseNonce()
	last, sentBefore := p.sent[typeURL]
	if !sentBefore || nonce == "" || nonce == last.nonce {
		p.subs[typeURL] = subscriptionOf(w.sub)
	} // else stale: keep what the proxy asked for before
	p.watches[typeURL] = w
	delete(p.pending, typeURL) // a response queued for an older watch is dropped with it
	dc := p.debug
	if dc == nil && typeURL != typeSecret {
		p.respondLocked(typeURL, w, p.srv.state.Load())
		if typeURL == typeEndpoint {
			p.endpointsAskedLocked()
		}
	}
	p.mu.Unlock()
	if dc == nil && typeURL == typeSecret {
		p.refreshSecrets()
	}
	// A debug client's every request but the ACK of the last response is
	// a question (istioctl sends made-up nonces).
	if dc != nil && !(sentBefore && nonce == last.nonce) {
		p.respondDebug(typeURL, w, dc)
	}
	return func() {
		p.mu.Lock()
		if p.watches[typeURL] == w {
			delete(p.watches, typeURL)
		}
		p.mu.Unlock()
	}
}

// pushAll answers every open watch that st changes: clusters first, then
// endpoints, then, unless new clusters warm (warming.go), listeners and
// routes.
func (p *proxy) pushAll(st *pushState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.respondTypesLocked(st, typeCluster, typeEndpoint)
	if !p.warm.holding() {
		p.respondTypesLocked(st, typeListener, typeRoute)
	}
}

// respondTypesLocked answers the open watches of types, in order.
func (p *proxy) respondTypesLocked(st *pushState, types ...string) {
	for _, t := range types {
		if w := p.watches[t]; w != nil {
			p.respondLocked(t, w, st)
		}
		if d := p.delta[t]; d != nil {
			p.respondDeltaLocked(t, d, st)
		}
	}
}

// respondLocked sends w the response to what the proxy asks for of
// typeURL when its version differs from the last one sent. The version
// covers the names asked for and the content, so a NACKed response is not
// repeated until one of them changes.
func (p *proxy) respondLocked(typeURL string, w *watch, st *pushState) {
	start := p.srv.cfg.Clock()
	r := p.sotwResponseLocked(st, typeURL, p.subs[typeURL])
	if last, ok := p.sent[typeURL]; ok && last.version == r.version {
		return
	}
	resp := &cache.PassthroughResponse{
		Request: w.req,
		DiscoveryResponse: &discovery.DiscoveryResponse{
			VersionInfo: r.version,
			TypeUrl:     typeURL,
			Resources:   r.resources, // shared: go-control-plane only sets the nonce on the response
		},
	}
	// The stream's channel holds one response per type, and a watch gets
	// one response, so this never blocks; if it would, the watch stays open
	// and the next push retries rather than stalling every proxy.
	select {
	case w.ch <- resp:
	default:
		p.srv.log.Error("response channel full; retrying on the next push", "node", p.node.GetId(), "type", shortType(typeURL))
		return
	}
	delete(p.watches, typeURL) // one response per watch
	p.pending[typeURL] = sent{version: r.version, bundle: r.bundle(typeURL), changedAt: st.changedAt}
	p.srv.metrics.observe(typeURL, p.srv.cfg.Clock().Sub(start), r.size)
	if typeURL == typeCluster {
		p.clustersSentLocked(st, slices.Collect(r.names))
	}
}

// responseLocked returns the resources of typeURL the proxy asks for in
// sub: shared with every proxy asking the same of st, except secrets,
// which are the proxy's own.
func (p *proxy) responseLocked(st *pushState, typeURL string, sub subscription) *response {
	key := sharedKey{typeURL: typeURL, names: sub.key, wildcard: sub.wildcard}
	switch typeURL {
	case typeSecret:
		r := &response{gen: p.secretsLocked(sub)}
		r.finish(key)
		return r
	case TypeProxyConfig:
		return p.proxyConfigLocked(key)
	}
	p.rescopeLocked(st)
	key.proxy = p.shareKey(typeURL)
	return st.response(p.srv, p.scopeGen, key, sub.names)
}

// rescopeLocked makes the proxy's generation scope that of st: the one it
// has when only endpoints and pods that it does not read changed since.
func (p *proxy) rescopeLocked(st *pushState) {
	ms := p.srv.meshOf(st)
	if p.scopeSnap == st.snap && p.scopeMesh == ms {
		return
	}
	if p.scopeSnap != nil && p.scopeMesh == ms {
		if c, ok := st.since(&p.srv.history, p.scopeSeq); ok && !c.touches(p.wl, st.snap) {
			p.scopeSnap, p.scopeSeq = st.snap, st.seq
			return
		}
	}
	p.scopeKey, p.scopeGen = ms.Scope(p.wl, st.snap)
	p.endpointsKey = cmp.Or(ms.EndpointsKey(p.wl, st.snap), p.scopeKey)
	p.scopeSnap, p.scopeMesh, p.scopeSeq = st.snap, ms, st.seq
}

// shareKey is the key under which the proxy shares responses of typeURL
// with other proxies of its push state: its scope, or for load
// assignments the wider endpointsKey.
func (p *proxy) shareKey(typeURL string) string {
	if typeURL == typeEndpoint {
		return p.endpointsKey
	}
	return p.scopeKey
}

// lastResponse is the response last computed for one type of a state of
// the world stream, and what it was computed for.
type lastResponse struct {
	r        *response
	basis    basis
	names    string // the subscription's key
	wildcard bool
}

// sotwResponseLocked is responseLocked, brought up to date from the
// response last computed for the proxy when only endpoints changed since:
// the same response, or for load assignments the last one with those of
// the changed services generated again.
func (p *proxy) sotwResponseLocked(st *pushState, typeURL string, sub subscription) *response {
	if !generatedType(typeURL) {
		return p.responseLocked(st, typeURL, sub)
	}
	p.rescopeLocked(st)
	last := p.last[typeURL]
	r := last.r
	c, ok := p.srv.changesSince(st, last.basis, p.scopeKey)
	switch {
	case !ok || r == nil || last.names != sub.key || last.wildcard != sub.wildcard || (sub.wildcard && !p.wl.Envoy) || st.fullAfter(p, typeURL, c, last.basis.seq):
		r = p.responseLocked(st, typeURL, sub)
	default:
		names := r.names // a wildcard's: those it was sent; else those asked for
		if !sub.wildcard {
			names = slices.Values(sub.names)
		}
		if changed, _ := st.changedNames(p, typeURL, c, affectedKey{names: r, from: last.basis.seq}, names, sub.wildcard); len(changed) > 0 {
			key := sharedKey{typeURL: typeURL, proxy: p.shareKey(typeURL), names: sub.key, wildcard: sub.wildcard}
			r = st.derived(p.srv, p.scopeGen, key, r, changed)
		}
	}
	p.last[typeURL] = lastResponse{r: r, basis: basis{seq: st.seq, scope: p.scopeKey, set: true}, names: sub.key, wildcard: sub.wildcard}
	return r
}

// responded records a response the stream is sending. It reports whether
// the stream is a proxy's, not a debug client's.
func (p *proxy) responded(resp *discovery.DiscoveryResponse) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pending[resp.GetTypeUrl()]
	if s.version == resp.GetVersionInfo() {
		delete(p.pending, resp.GetTypeUrl())
	}
	s.version, s.nonce, s.at = resp.GetVersionInfo(), resp.GetNonce(), p.srv.cfg.Clock()
	p.sent[resp.GetTypeUrl()] = s
	return p.debug == nil
}

// nackRepeated is reported for a NACK repeating the last one's detail, so
// that a proxy cannot flood the log.
const nackRepeated = "\x00repeated"

// received records the ACK or NACK a request carries. It reports a NACK's
// error detail, or nackRepeated.
func (p *proxy) received(typeURL, nonce string, detail *rpcstatus.Status) (nack string, acked bool, convergence time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sent[typeURL]
	if !ok || nonce == "" || nonce != s.nonce {
		return "", false, 0 // first request or stale nonce
	}
	if detail != nil {
		if p.nacked[typeURL] == detail.GetMessage() {
			return nackRepeated, false, 0
		}
		p.nacked[typeURL] = detail.GetMessage()
		return detail.GetMessage(), false, 0
	}
	delete(p.nacked, typeURL)
	p.acked[typeURL] = s.version
	if typeURL == TypeProxyConfig {
		p.bundleAcked = s.bundle
	}
	if s.changedAt.IsZero() {
		return "", true, 0
	}
	d := p.srv.cfg.Clock().Sub(s.changedAt)
	s.changedAt = time.Time{} // observe once
	p.sent[typeURL] = s
	return "", true, d
}

func (p *proxy) status() (ProxyStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.node == nil || p.debug != nil {
		return ProxyStatus{}, false
	}
	st := ProxyStatus{NodeID: p.node.GetId(), Sent: map[string]string{}, Acked: map[string]string{}, Rejected: map[string]string{}}
	for t, s := range p.sent {
		st.Sent[t] = s.version
	}
	for t, v := range p.acked {
		st.Acked[t] = v
	}
	for t, v := range p.nacked {
		st.Rejected[t] = v
	}
	return st, true
}

func subscriptionOf(sub cache.Subscription) subscription {
	names := make([]string, 0, len(sub.SubscribedResources()))
	for n := range sub.SubscribedResources() {
		names = append(names, n)
	}
	slices.Sort(names)
	return subscription{names: names, key: namesKey(names), wildcard: sub.IsWildcard()}
}
