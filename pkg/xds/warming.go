package xds

import (
	"slices"
	"time"
)

// defaultWarmingHold bounds how long a sidecar's listeners and routes
// wait for it to ask for the endpoints of new clusters.
const defaultWarmingHold = 5 * time.Second

// warming holds back a push's listeners and routes while the sidecar it
// sent new clusters to has not asked for their endpoints: Envoy asks
// right after the clusters, and a route to a cluster without endpoints
// would fail. The endpoints go out with the request, then the listeners
// and routes (the order the xDS protocol asks of a server).
type warming struct {
	awaited []string    // load assignments of new clusters not asked for yet
	timer   *time.Timer // releases the hold after the server's warmingHold
}

// holding reports whether listeners and routes wait.
func (w *warming) holding() bool { return len(w.awaited) > 0 }

// clustersSentLocked notes that clusters named in sent are on their way
// to the sidecar, and holds back its listeners and routes if it does not
// ask for the endpoints of some yet.
func (p *proxy) clustersSentLocked(st *pushState, sent []string) {
	if p.wl == nil || !p.wl.Envoy || p.debug != nil || len(sent) == 0 {
		return
	}
	var unasked []string
	for _, n := range sent {
		if !p.asksEndpointsLocked(n) {
			unasked = append(unasked, n)
		}
	}
	if len(unasked) == 0 {
		return
	}
	p.rescopeLocked(st)
	var awaited []string
	for _, r := range p.scopeGen(st.snap, typeEndpoint, unasked, false) {
		awaited = append(awaited, r.Name) // an EDS cluster's
	}
	if len(awaited) == 0 {
		return
	}
	p.warm.awaited = awaited
	if p.warm.timer == nil {
		p.warm.timer = time.AfterFunc(p.srv.warmingHold, p.warmingTimedOut)
	} else {
		p.warm.timer.Reset(p.srv.warmingHold)
	}
}

// asksEndpointsLocked reports whether the sidecar subscribes to the load
// assignment name.
func (p *proxy) asksEndpointsLocked(name string) bool {
	if d := p.delta[typeEndpoint]; d != nil {
		return d.names.contains(name)
	}
	_, ok := slices.BinarySearch(p.subs[typeEndpoint].names, name)
	return ok
}

// endpointsAskedLocked releases the listeners and routes held back once
// the sidecar asks for every load assignment awaited.
func (p *proxy) endpointsAskedLocked() {
	if !p.warm.holding() || slices.ContainsFunc(p.warm.awaited, func(n string) bool { return !p.asksEndpointsLocked(n) }) {
		return
	}
	p.releaseWarmingLocked()
}

func (p *proxy) warmingTimedOut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warm.holding() {
		p.releaseWarmingLocked()
	}
}

// releaseWarmingLocked sends the listeners and routes held back.
func (p *proxy) releaseWarmingLocked() {
	p.warm.awaited = nil
	if p.warm.timer != nil {
		p.warm.timer.Stop()
	}
	p.respondTypesLocked(p.srv.state.Load(), typeListener, typeRoute)
}
