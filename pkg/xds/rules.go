package xds

import (
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// ruleNamesFor returns the names of the resources of typeURL that the
// rules changed in c may change for the Envoy proxy p, whose basis is
// push from: none when it sees none of them. Proxyless gRPC that sees
// them, and the listeners and routes of a router whose Gateways read
// them, are answered in full after them (fullAfter).
func (st *pushState) ruleNamesFor(p *proxy, c endpointChanges, from uint64, typeURL string) map[string]bool {
	if c.rules == nil || !p.wl.Envoy || (p.wl.Router && (typeURL == typeListener || typeURL == typeRoute)) {
		return nil
	}
	names := c.rules.Names(typeURL)
	if len(names) == 0 || !st.seesRules(p, c.rules, from) {
		return nil
	}
	return names
}

// seesKey names whether the proxies of one scope see the rules changed
// since one push (of a router, with gateway, whether its Gateways read
// them).
type seesKey struct {
	from    uint64
	scope   string
	gateway bool
}

// seesRules is envoygen's SeesRules for p, once per push state, basis
// and scope: the proxies of a scope share its namespace and labels (and
// the Sidecar configuring them).
func (st *pushState) seesRules(p *proxy, r *envoygen.Rules, from uint64) bool {
	return st.sees(p, seesKey{from: from, scope: p.scopeKey}, func(g *envoygen.Generator, ep *envoygen.Proxy) bool {
		return g.SeesRules(st.snap, ep, r)
	})
}

// routerSeesRules is envoygen's RouterSeesRules for p, as seesRules.
func (st *pushState) routerSeesRules(p *proxy, r *envoygen.Rules, from uint64) bool {
	return st.sees(p, seesKey{from: from, scope: p.scopeKey, gateway: true}, func(g *envoygen.Generator, ep *envoygen.Proxy) bool {
		return g.RouterSeesRules(st.snap, ep, r)
	})
}

func (st *pushState) sees(p *proxy, k seesKey, sees func(*envoygen.Generator, *envoygen.Proxy) bool) bool {
	st.mu.Lock()
	v, ok := st.seesCache[k]
	st.mu.Unlock()
	if ok {
		return v
	}
	labels, _ := p.wl.In(st.snap)
	v = sees(p.srv.meshOf(st).Envoy, &envoygen.Proxy{Namespace: p.wl.Namespace, Labels: labels, Router: p.wl.Router, Unprivileged: p.wl.Unprivileged})
	st.mu.Lock()
	if st.seesCache == nil {
		st.seesCache = map[seesKey]bool{}
	}
	st.seesCache[k] = v
	st.mu.Unlock()
	return v
}
