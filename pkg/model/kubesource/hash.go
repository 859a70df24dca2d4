package kubesource

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// versionOf hashes everything of res a snapshot exposes, so that equal
// content gives an equal version and any change a new one. res must be
// sorted.
func versionOf(res *model.Resources, specBytes func(proto.Message) []byte) string {
	h := &hasher{h: sha256.New(), specBytes: specBytes}
	h.count(len(res.Services))
	for _, s := range res.Services {
		h.str(s.Namespace, s.Name)
		h.labels(s.Selector)
		h.count(len(s.Addresses))
		h.str(s.Addresses...)
		if s.Headless {
			h.count(1)
		} else {
			h.count(0)
		}
		h.count(len(s.Ports))
		for _, p := range s.Ports {
			h.str(p.Name, p.TargetPortName, p.Protocol)
			h.count(int(p.Port), int(p.TargetPort))
			eps := s.Endpoints[p.Port]
			h.count(len(eps))
			for _, e := range eps {
				h.str(e.Address, e.Locality, e.ServiceAccount, e.Namespace)
				h.count(int(e.Port), int(e.Weight))
				h.labels(e.Labels)
			}
		}
	}
	h.count(len(res.Pods))
	for _, p := range res.Pods {
		h.str(p.Namespace, p.Name, p.UID, p.ServiceAccount)
		h.labels(p.Labels)
		h.count(len(p.IPs))
		h.str(p.IPs...)
	}
	h.specs(len(res.PeerAuthentications), func(i int) (model.Meta, proto.Message) {
		return res.PeerAuthentications[i].Meta, res.PeerAuthentications[i].Spec
	})
	h.specs(len(res.AuthorizationPolicies), func(i int) (model.Meta, proto.Message) {
		return res.AuthorizationPolicies[i].Meta, res.AuthorizationPolicies[i].Spec
	})
	h.specs(len(res.RequestAuthentications), func(i int) (model.Meta, proto.Message) {
		return res.RequestAuthentications[i].Meta, res.RequestAuthentications[i].Spec
	})
	h.specs(len(res.DestinationRules), func(i int) (model.Meta, proto.Message) {
		return res.DestinationRules[i].Meta, res.DestinationRules[i].Spec
	})
	return hex.EncodeToString(h.h.Sum(nil))[:16]
}

// hasher writes length-prefixed values, so that no two sequences of values
// write the same bytes.
type hasher struct {
	h         hash.Hash
	buf       []byte
	keys      []string
	specBytes func(proto.Message) []byte
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

// specs hashes n named protos, each as specBytes gives it.
func (h *hasher) specs(n int, at func(int) (model.Meta, proto.Message)) {
	h.count(n)
	for i := range n {
		meta, spec := at(i)
		h.str(meta.Namespace, meta.Name)
		b := h.specBytes(spec)
		h.count(len(b))
		h.h.Write(b)
	}
}
