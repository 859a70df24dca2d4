package debug

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
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

// SynczHandler serves syncz as JSON to callers on a loopback address and
// answers 403 to any other: it names every connected workload, so it is
// for an operator on istiod's host (kubectl port-forward, exec), not for
// the network. It is meant for the monitoring listener under
// GET /debug/syncz.
func SynczHandler(syncz func() []SyncStatus, log *slog.Logger) http.Handler {
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
		body, err := json.MarshalIndent(syncz(), "", "  ")
		if err != nil {
			log.Error("encoding syncz", "err", err)
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
