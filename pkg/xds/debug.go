package xds

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// Syncz returns the sync state of every authenticated proxy, by stream.
func (s *Server) Syncz() []debug.SyncStatus {
	ps := s.proxies()
	out := make([]debug.SyncStatus, 0, len(ps))
	for _, p := range ps {
		if st, ok := p.syncz(s); ok {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b debug.SyncStatus) int {
		return cmp.Or(cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.Stream, b.Stream))
	})
	return out
}

func (p *proxy) syncz(s *Server) (debug.SyncStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.node == nil || p.debug != nil {
		return debug.SyncStatus{}, false
	}
	st := debug.SyncStatus{Stream: p.streamID, NodeID: p.node.GetId(), Types: map[string]debug.TypeSync{}}
	// The node was checked against the caller when it was stored, so the
	// identity it claims is the authenticated one.
	if meta, err := identity.ParseNode(p.node); err == nil {
		if id, err := meta.Identity(s.cfg.TrustDomain); err == nil {
			st.Identity = id.String()
		}
	}
	for t, sn := range p.sent {
		ts := st.Types[t]
		ts.Sent, ts.LastNonce = sn.version, sn.nonce
		st.Types[t] = ts
	}
	for t, v := range p.acked {
		ts := st.Types[t]
		ts.Acked = v
		st.Types[t] = ts
	}
	for t, v := range p.nacked {
		ts := st.Types[t]
		ts.LastNACK = v
		st.Types[t] = ts
	}
	if root := s.rotationRoot.Load(); root != nil {
		st.LacksNewRoot = !s.bundles.holds(p.bundleAcked, root)
	}
	return st, true
}

// SynczHandler serves Syncz as JSON to callers on a loopback address
// (debug.SynczHandler), for the monitoring listener under GET /debug/syncz.
func (s *Server) SynczHandler() http.Handler { return debug.SynczHandler(s.Syncz, s.log) }
