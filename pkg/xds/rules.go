package xds

import (
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
)

// ruleNamesFor returns the names of the resources of typeURL that the
// rules changed in c may change for the Envoy proxy p, whose basis is
// push from: none when it sees none of them. Proxyless gRPC is answered
// in full after them (fullAfter).
func (st *pushState) ruleNamesFor(p *proxy, c endpointChanges, from uint64, typeURL string) map[string]bool {
	if c.rules == nil || !p.wl.Envoy {
		return nil
	}
	names := c.rules.Names(typeURL)
	if len(names) == 0 || !st.seesRules(p, c.rules, from) {
		return nil
	}
	return names
}

// seesKey names whether the proxies of one scope see the rules changed
// since one push.
type seesKey struct {
	from  uint64
	scope string
}

// seesRules is envoygen's SeesRules for p, once per push state, basis
// and scope: the proxies of a scope share its namespace and labels.
func (st *pushState) seesRules(p *proxy, r *envoygen.Rules, from uint64) bool {
	k := seesKey{from: from, scope: p.scopeKey}
	st.mu.Lock()
	v, ok := st.seesCache[k]
	st.mu.Unlock()
	if ok {
		return v
	}
	labels, _ := p.wl.In(st.snap)
	v = p.srv.meshOf(st).Envoy.SeesRules(st.snap, &envoygen.Proxy{Namespace: p.wl.Namespace, Labels: labels, Router: p.wl.Router}, r)
	st.mu.Lock()
	if st.seesCache == nil {
		st.seesCache = map[seesKey]bool{}
	}
	st.seesCache[k] = v
	st.mu.Unlock()
	return v
}
