package xds

import (
	"cmp"
	"encoding/json"
	"net"
	"net/http"
	"slices"
)

// SyncStatus is one connected proxy as /debug/syncz shows it. It carries
// versions, nonces and NACK details only: never resource contents, keys or
// node metadata beyond the identity it was authenticated as.
type SyncStatus struct {
	// Stream is the server's stream ID (negative for incremental streams).
	Stream   int64  `json:"stream"`
	NodeID   string `json:"nodeId"`
	Identity string `json:"identity"`
	// Types is keyed by type URL.
	Types map[string]TypeSync `json:"types"`
	// LacksNewRoot marks a proxy a root rotation waits for: its last ACKed
	// trust bundle does not hold the new root.
	LacksNewRoot bool `json:"lacksNewRoot,omitempty"`
}

// TypeSync is the state of one type URL on one stream.
type TypeSync struct {
	Sent      string `json:"sent,omitempty"`      // version last sent
	Acked     string `json:"acked,omitempty"`     // version last acknowledged
	LastNonce string `json:"lastNonce,omitempty"` // nonce of the last response sent
	// LastNACK is the error detail of the NACK of the last version sent;
	// empty once a later version is acknowledged.
	LastNACK string `json:"lastNack,omitempty"`
}

// Syncz returns the sync state of every authenticated proxy, by stream.
func (s *Server) Syncz() []SyncStatus {
	ps := s.proxies()
	out := make([]SyncStatus, 0, len(ps))
	for _, p := range ps {
		if st, ok := p.syncz(s); ok {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b SyncStatus) int {
		return cmp.Or(cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.Stream, b.Stream))
	})
	return out
}

func (p *proxy) syncz(s *Server) (SyncStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.node == nil || p.debug != nil {
		return SyncStatus{}, false
	}
	st := SyncStatus{Stream: p.streamID, NodeID: p.node.GetId(), Types: map[string]TypeSync{}}
	// The node was checked against the caller when it was stored, so the
	// identity it claims is the authenticated one.
	if meta, err := ParseNode(p.node); err == nil {
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

// SynczHandler serves Syncz as JSON to callers on a loopback address and
// answers 403 to any other: it names every connected workload, so it is
// for an operator on istiod's host (kubectl port-forward, exec), not for
// the network. It is meant for the monitoring listener under
// GET /debug/syncz.
func (s *Server) SynczHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isLoopback(r.RemoteAddr) {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := json.MarshalIndent(s.Syncz(), "", "  ")
		if err != nil {
			s.log.Error("encoding syncz", "err", err)
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(body, '\n'))
	})
}

// isLoopback reports whether addr, a "host:port" as http.Request's
// RemoteAddr, is a loopback IP.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
