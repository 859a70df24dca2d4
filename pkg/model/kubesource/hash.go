package kubesource

import (
	"crypto/sha256"
	"encoding/binary"
	"google.golang.org/protobuf/encoding/prototext"
	"hash"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// serviceDigest hashes everything of s a snapshot exposes.
func serviceDigest(s *model.Service) [sha256.Size]byte {
	h := &hasher{h: sha256.New()}
	h.str(s.Namespace, s.Name, s.Hostname)
	h.labels(s.Selector)
	h.count(len(s.Addresses))
	h.str(s.Addresses...)
	h.count(len(s.ExportTo))
	h.str(s.ExportTo...)
	if s.Headless {
		h.count(1)
	} else {
		h.count(0)
	}
	h.count(len(s.Exposures))
	for _, e := range s.Exposures {
		h.str(e.Cluster, e.Network, e.GatewayPort)
		h.count(boolCount(e.NodePort), boolCount(e.NodeSelectorInvalid), len(e.NodePorts))
		for _, p := range e.NodePorts {
			h.count(int(p))
		}
		h.count(len(e.Addresses))
		h.str(e.Addresses...)
		h.count(len(e.Ports))
		for _, p := range e.Ports {
			h.count(int(p))
		}
	}
	h.count(len(s.Ports))
	for _, p := range s.Ports {
		h.str(p.Name, p.TargetPortName, p.Protocol)
		h.count(int(p.Port), int(p.TargetPort))
		eps := s.Endpoints[p.Port]
		h.count(len(eps))
		for _, e := range eps {
			h.str(e.Address, e.Locality, e.ServiceAccount, e.Namespace, e.Cluster, e.Network)
			h.count(int(e.Port), int(e.Weight))
			h.labels(e.Labels)
		}
	}
	return h.sum()
}

// podDigest hashes everything of p a snapshot exposes.
func podDigest(p *model.Pod) [sha256.Size]byte {
	h := &hasher{h: sha256.New()}
	h.str(p.Namespace, p.Name, p.UID, p.ServiceAccount)
	h.labels(p.Labels)
	h.count(len(p.IPs))
	h.str(p.IPs...)
	h.str(p.Locality, p.Network)
	return h.sum()
}

// policyDigest hashes a policy's name and spec: its spec's deterministic
// marshalling, stable within a process, which is all a version needs, or
// for a message that does not marshal (invalid UTF-8) its text form.
func policyDigest(meta model.Meta, spec proto.Message) [sha256.Size]byte {
	h := &hasher{h: sha256.New()}
	h.str(meta.Namespace, meta.Name)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	if err != nil {
		b = []byte("text:" + prototext.Format(spec))
	}
	h.count(len(b))
	h.h.Write(b)
	return h.sum()
}

// hasher writes length-prefixed values, so that no two sequences of values
// write the same bytes.
type hasher struct {
	h    hash.Hash
	buf  []byte
	keys []string
}

func (h *hasher) flush() {
	h.h.Write(h.buf)
	h.buf = h.buf[:0]
}

func (h *hasher) count(ns ...int) {
	for _, n := range ns {
		h.buf = binary.AppendUvarint(h.buf, uint64(n))
	}
	h.flush()
}

func (h *hasher) str(ss ...string) {
	for _, s := range ss {
		h.buf = binary.AppendUvarint(h.buf, uint64(len(s)))
		h.buf = append(h.buf, s...)
	}
	h.flush()
}

func (h *hasher) labels(m map[string]string) {
	h.keys = slices.AppendSeq(h.keys[:0], maps.Keys(m))
	slices.Sort(h.keys)
	h.count(len(h.keys))
	for _, k := range h.keys {
		h.str(k, m[k])
	}
}

func (h *hasher) sum() (d [sha256.Size]byte) {
	h.h.Sum(d[:0])
	return d
}

// boolCount is b as a count: 1 or 0.
func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}
