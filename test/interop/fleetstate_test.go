package interop

import (
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// fleetGoal is what the benchmark waits for every proxy to hold after a
// change: load assignments with given endpoints, a cluster, and a needle
// (a string a listener or route configuration must contain).
type fleetGoal struct {
	seq int
	// eds maps EDS names to the fingerprint of the endpoints wanted.
	eds map[string]uint64
	// cluster, when set, must be among the proxy's clusters.
	cluster string
	// needle, when set, must be in a listener or route configuration the
	// proxy received since the goal was set, for the proxies of needleFor
	// (every proxy when nil).
	needle    []byte
	needleFor map[*fleetProxy]bool
	// complete asks, besides, that every EDS and RDS name the proxy
	// subscribed to has been answered and LDS too: it holds the whole
	// configuration, as Envoy needs before its listeners take traffic.
	complete bool
}

func (g *fleetGoal) wantsNeedle(p *fleetProxy) bool {
	return g.needle != nil && (g.needleFor == nil || g.needleFor[p])
}

// proxyState is what one ADS stream of a proxy holds. A new stream
// starts from nothing, as Envoy's resources are re-requested from scratch
// by this client.
type proxyState struct {
	clusters   map[string]string   // name → EDS name ("" when not EDS)
	eds        map[string]uint64   // subscribed EDS name → fingerprint, 0 until answered
	addrs      map[string][]string // subscribed EDS name → addresses (sample proxies only)
	listeners  map[string][]string // name → RDS names it asks for
	routes     map[string]bool     // subscribed RDS name → answered
	pendingEDS int
	pendingRDS int
	gotCDS     bool
	gotLDS     bool
	askedLDS   bool
	bytes      int64 // response payload received on this stream
}

func newProxyState() proxyState {
	return proxyState{clusters: map[string]string{}, eds: map[string]uint64{}, addrs: map[string][]string{},
		listeners: map[string][]string{}, routes: map[string]bool{}}
}

func (s *proxyState) complete() bool {
	return s.gotCDS && s.gotLDS && s.pendingEDS == 0 && s.pendingRDS == 0
}

// goalProgress is how far a proxy is towards the goal of sequence seq.
type goalProgress struct {
	seq       int
	edsOK     int       // names of goal.eds whose fingerprint matches
	clusterAt time.Time // goal.cluster first held
	edsAt     time.Time // every goal.eds name first matched
	needleAt  time.Time // the needle first received
	metAt     time.Time // everything first held at once
}

// resetProgress starts following g from the proxy's current state.
func (p *fleetProxy) resetProgress(g *fleetGoal, now time.Time) {
	p.prog = goalProgress{seq: g.seq}
	for name, want := range g.eds {
		if p.s.eds[name] == want {
			p.prog.edsOK++
		}
	}
	if _, ok := p.s.clusters[g.cluster]; ok && g.cluster != "" {
		p.prog.clusterAt = now
	}
	p.checkMet(g, now)
}

func (p *fleetProxy) checkMet(g *fleetGoal, now time.Time) {
	pr := &p.prog
	if pr.edsOK == len(g.eds) && pr.edsAt.IsZero() {
		pr.edsAt = now
	}
	if !pr.metAt.IsZero() || pr.edsAt.IsZero() ||
		(g.cluster != "" && pr.clusterAt.IsZero()) ||
		(g.wantsNeedle(p) && pr.needleAt.IsZero()) ||
		(g.complete && !p.s.complete()) {
		return
	}
	pr.metAt = now
	if g.complete && p.readyAt.IsZero() {
		p.readyAt = now
		p.readyAfter = now.Sub(p.streamAt)
		p.readyBytes = p.s.bytes
	}
}

// setLoad records the endpoints of a subscribed EDS name; answers for
// names not subscribed are ignored, as Envoy ignores them.
func (p *fleetProxy) setLoad(g *fleetGoal, name string, fp uint64, addrs []string) {
	old, ok := p.s.eds[name]
	if !ok {
		return
	}
	if old == 0 {
		p.s.pendingEDS--
	}
	p.s.eds[name] = fp
	if p.detail {
		p.s.addrs[name] = addrs
	}
	p.countLoad(g, name, old, fp)
}

func (p *fleetProxy) unsubscribeLoad(g *fleetGoal, name string) {
	old, ok := p.s.eds[name]
	if !ok {
		return
	}
	if old == 0 {
		p.s.pendingEDS--
	}
	delete(p.s.eds, name)
	delete(p.s.addrs, name)
	p.countLoad(g, name, old, 0)
}

func (p *fleetProxy) countLoad(g *fleetGoal, name string, old, fp uint64) {
	want, ok := g.eds[name]
	switch {
	case !ok:
	case old == want && fp != want:
		p.prog.edsOK--
	case old != want && fp == want:
		p.prog.edsOK++
	}
}

// apply takes one response as Envoy would and returns the requests Envoy
// sends next: subscription changes first, then the ACK. cur is the goal in
// force; needles were looked for with decodedFor.
func (p *fleetProxy) apply(r *fleetResponse, cur, decodedFor *fleetGoal, now time.Time) []*discovery.DeltaDiscoveryRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prog.seq != cur.seq {
		p.resetProgress(cur, now)
	}
	s := &p.s
	s.bytes += int64(r.size)
	p.respAt = now
	var out []*discovery.DeltaDiscoveryRequest
	switch r.typeURL {
	case fleetCDS:
		s.gotCDS = true
		var sub, unsub []string
		for _, name := range r.removed {
			if eds := s.clusters[name]; eds != "" {
				p.unsubscribeLoad(cur, eds)
				unsub = append(unsub, eds)
			}
			delete(s.clusters, name)
		}
		for _, c := range r.clusters {
			if old := s.clusters[c.name]; old != "" && old != c.eds {
				p.unsubscribeLoad(cur, old)
				unsub = append(unsub, old)
			}
			s.clusters[c.name] = c.eds
			if _, ok := s.eds[c.eds]; c.eds != "" && !ok {
				s.eds[c.eds] = 0
				s.pendingEDS++
				sub = append(sub, c.eds)
			}
			if c.name == cur.cluster && p.prog.clusterAt.IsZero() {
				p.prog.clusterAt = now
			}
		}
		if len(sub)+len(unsub) > 0 {
			out = append(out, &discovery.DeltaDiscoveryRequest{TypeUrl: fleetEDS,
				ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub})
		}
	case fleetEDS:
		for _, l := range r.loads {
			p.setLoad(cur, l.name, l.fp, l.addrs)
		}
		for _, name := range r.removed {
			p.setLoad(cur, name, emptyLoad, nil)
		}
	case fleetLDS:
		s.gotLDS = true
		p.ldsAt = now
		for _, name := range r.removed {
			delete(s.listeners, name)
		}
		for _, l := range r.listeners {
			s.listeners[l.name] = l.routes
		}
		if req := p.resubscribeRoutes(); req != nil {
			out = append(out, req)
		}
	case fleetRDS:
		for _, name := range append(r.routes, r.removed...) {
			if answered, ok := s.routes[name]; ok && !answered {
				s.routes[name] = true
				s.pendingRDS--
			}
		}
	}
	out = append(out, &discovery.DeltaDiscoveryRequest{TypeUrl: r.typeURL, ResponseNonce: r.nonce})
	if r.needleIn && decodedFor == cur && p.prog.needleAt.IsZero() {
		p.prog.needleAt = now
	}
	if !s.askedLDS && s.gotCDS && s.pendingEDS == 0 {
		// Envoy asks for listeners once its first clusters have warmed,
		// that is, have their endpoints.
		s.askedLDS = true
		out = append(out, &discovery.DeltaDiscoveryRequest{TypeUrl: fleetLDS})
	}
	p.checkMet(cur, now)
	return out
}

// resubscribeRoutes makes the RDS subscription the set of route names the
// listeners ask for, and returns the request that says so (nil: no
// change).
func (p *fleetProxy) resubscribeRoutes() *discovery.DeltaDiscoveryRequest {
	s := &p.s
	want := map[string]bool{}
	for _, routes := range s.listeners {
		for _, r := range routes {
			want[r] = true
		}
	}
	var sub, unsub []string
	for r := range want {
		if _, ok := s.routes[r]; !ok {
			s.routes[r] = false
			s.pendingRDS++
			sub = append(sub, r)
		}
	}
	for r, answered := range s.routes {
		if !want[r] {
			if !answered {
				s.pendingRDS--
			}
			delete(s.routes, r)
			unsub = append(unsub, r)
		}
	}
	if len(sub)+len(unsub) == 0 {
		return nil
	}
	slices.Sort(sub)
	slices.Sort(unsub)
	return &discovery.DeltaDiscoveryRequest{TypeUrl: fleetRDS, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}
}

// proxySnapshot is a sample proxy's configuration, for comparing the
// control planes: its clusters, and each EDS cluster's endpoints.
type proxySnapshot struct {
	clusters  []string
	endpoints map[string][]string // cluster name → sorted "ip:port"
}

func (p *fleetProxy) snapshot() proxySnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	snap := proxySnapshot{endpoints: map[string][]string{}}
	for name, eds := range p.s.clusters {
		snap.clusters = append(snap.clusters, name)
		if eds != "" {
			addrs := slices.Clone(p.s.addrs[eds])
			slices.Sort(addrs)
			snap.endpoints[name] = addrs
		}
	}
	slices.Sort(snap.clusters)
	return snap
}
