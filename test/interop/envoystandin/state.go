package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// State is what the stand-in holds, as the state file shows it.
type State struct {
	Seq       int       `json:"seq"` // increases with every write
	UpdatedAt time.Time `json:"updatedAt"`
	PID       int       `json:"pid"`
	Args      []string  `json:"args"`
	Exited    bool      `json:"exited,omitempty"`

	Node      json.RawMessage `json:"node"`
	Bootstrap struct {
		ADSType      string            `json:"adsType"`
		XDSPath      string            `json:"xdsPath"`
		AdminAddress string            `json:"adminAddress"`
		Pipes        map[string]string `json:"pipes"`
	} `json:"bootstrap"`

	Server struct {
		State          string     `json:"state"` // Envoy's server.state: INITIALIZING, LIVE
		WorkersStarted bool       `json:"workersStarted"`
		LiveAt         *time.Time `json:"liveAt,omitempty"`
	} `json:"server"`

	// ADSStreams counts the Delta ADS streams opened.
	ADSStreams int `json:"adsStreams"`
	// XDS is the protocol state by short type name: CDS, EDS, LDS, RDS.
	XDS map[string]*TypeStatus `json:"xds"`
	// Resources are the accepted resources by short type name and name.
	Resources map[string]map[string]Held `json:"resources"`
	// Warming lists the accepted clusters and listeners that are not warm
	// yet, with what each waits for.
	Warming map[string][]string `json:"warming"`
	// Secrets are the SDS secrets by name.
	Secrets map[string]*SecretStatus `json:"secrets"`
	// Warnings are what Envoy would accept but a sidecar should not get.
	Warnings []string `json:"warnings"`
	// Admin counts the admin requests served, by method and path.
	Admin map[string]int `json:"admin"`
	// Stats are the Envoy stats /stats serves.
	Stats map[string]uint64 `json:"stats"`
	// Events are the ADS and SDS messages, oldest first (the last 1000).
	Events []Event `json:"events"`
}

// TypeStatus is one xDS type on the ADS stream.
type TypeStatus struct {
	Requested     bool     `json:"requested"` // the first request was sent
	Wildcard      bool     `json:"wildcard"`
	Subscribed    []string `json:"subscribed,omitempty"`
	Responses     int      `json:"responses"`
	ACKs          int      `json:"acks"`
	NACKs         int      `json:"nacks"`
	LastNACK      string   `json:"lastNack,omitempty"`
	LastNonce     string   `json:"lastNonce,omitempty"`
	SystemVersion string   `json:"systemVersion,omitempty"`
}

// Held is one accepted resource.
type Held struct {
	Version  string          `json:"version"`
	Resource json.RawMessage `json:"resource"` // protojson
}

// SecretStatus is one SDS secret.
type SecretStatus struct {
	Cluster          string `json:"cluster"`
	Streams          int    `json:"streams"`
	Version          string `json:"version,omitempty"`
	ACKs             int    `json:"acks"`
	NACKs            int    `json:"nacks"`
	LastNACK         string `json:"lastNack,omitempty"`
	Kind             string `json:"kind,omitempty"`             // tls_certificate, validation_context
	CertificateChain string `json:"certificateChain,omitempty"` // PEM (the key is not written)
	KeyMatches       bool   `json:"keyMatches,omitempty"`
	TrustedCA        string `json:"trustedCA,omitempty"` // PEM
	// VerifiedBy is the validation context secret the chain verified to;
	// VerifyError says why it did not.
	VerifiedBy  string `json:"verifiedBy,omitempty"`
	VerifyError string `json:"verifyError,omitempty"`
}

// Event is one message on the ADS stream or an SDS stream.
type Event struct {
	Time   time.Time `json:"time"`
	Sent   bool      `json:"sent"`
	Stream string    `json:"stream"` // "ads" or "sds <secret>"
	Type   string    `json:"type"`
	// What is subscribe, ack, nack or response.
	What        string   `json:"what"`
	Subscribe   []string `json:"subscribe,omitempty"`
	Unsubscribe []string `json:"unsubscribe,omitempty"`
	Resources   []string `json:"resources,omitempty"`
	Removed     []string `json:"removed,omitempty"`
	Nonce       string   `json:"nonce,omitempty"`
	Detail      string   `json:"detail,omitempty"`
}

const (
	maxEvents   = 1000
	maxWarnings = 200
	maxNames    = 50
)

// store is the State behind a lock, written to path on every change.
type store struct {
	mu   sync.Mutex
	path string
	log  *slog.Logger
	s    State
}

func newStore(path string, log *slog.Logger) *store {
	st := &store{path: path, log: log}
	st.s.PID = os.Getpid()
	st.s.XDS = map[string]*TypeStatus{}
	st.s.Resources = map[string]map[string]Held{}
	st.s.Warming = map[string][]string{}
	st.s.Secrets = map[string]*SecretStatus{}
	st.s.Admin = map[string]int{}
	st.s.Stats = map[string]uint64{}
	st.s.Server.State = "INITIALIZING"
	return st
}

func (st *store) setStart(args []string, b *bootInfo) {
	st.update(func(s *State) {
		s.Args = args
		s.Node = marshalJSON(b.node)
		s.Bootstrap.ADSType, s.Bootstrap.XDSPath, s.Bootstrap.AdminAddress, s.Bootstrap.Pipes = b.adsType, b.xdsPath, b.adminAddr, b.pipes
		s.Stats["server.state"] = 3 // INITIALIZING
		s.Stats["listener_manager.workers_started"] = 0
	})
}

func (st *store) finish() { st.update(func(s *State) { s.Exited = true }) }

// update changes the state under the lock and writes it.
func (st *store) update(fn func(*State)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fn(&st.s)
	st.writeLocked()
}

// read calls fn with the state under the lock.
func (st *store) read(fn func(*State)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fn(&st.s)
}

func (st *store) writeLocked() {
	st.s.Seq++
	st.s.UpdatedAt = time.Now()
	if len(st.s.Events) > maxEvents {
		st.s.Events = slices.Clone(st.s.Events[len(st.s.Events)-maxEvents:])
	}
	if st.path == "" {
		return
	}
	b, err := json.MarshalIndent(&st.s, "", " ")
	if err != nil {
		st.log.Error("marshal state", "err", err)
		return
	}
	// Atomically: a reader sees the old file or the new one.
	tmp, err := os.CreateTemp(filepath.Dir(st.path), ".standin-state-*")
	if err != nil {
		st.log.Error("write state", "err", err)
		return
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), st.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		st.log.Error("write state", "err", err)
	}
}

// event appends e (with the time) to the state's events.
func (s *State) event(e Event) {
	e.Time = time.Now()
	e.Subscribe, e.Unsubscribe = clip(e.Subscribe), clip(e.Unsubscribe)
	e.Resources, e.Removed = clip(e.Resources), clip(e.Removed)
	s.Events = append(s.Events, e)
}

func (s *State) warn(ws ...string) {
	for _, w := range ws {
		if !slices.Contains(s.Warnings, w) && len(s.Warnings) < maxWarnings {
			s.Warnings = append(s.Warnings, w)
		}
	}
}

func clip(names []string) []string {
	if len(names) > maxNames {
		return append(slices.Clone(names[:maxNames]), "…")
	}
	return names
}

func marshalJSON(m proto.Message) json.RawMessage {
	b, err := protojson.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return b
}
