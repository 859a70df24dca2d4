package envoygen

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// The resources every sidecar receives by the thousand (outbound clusters
// and their load assignments) are encoded here directly in protobuf's wire
// format: field by field into one buffer, with the parts they share
// marshalled once (resource.Preencoded). Building and marshalling them as
// go-control-plane messages costs several times more in allocation and
// reflection. Field numbers are those of Envoy's v3 API; the tests decode
// every generated resource and check it as a message.

// wire appends protobuf fields to a buffer.
type wire []byte

func (w wire) str(num protowire.Number, s string) wire {
	if s == "" {
		return w // proto3: the default is not sent
	}
	w = protowire.AppendTag(w, num, protowire.BytesType)
	return protowire.AppendString(w, s)
}

func (w wire) varint(num protowire.Number, v uint64) wire {
	if v == 0 {
		return w
	}
	w = protowire.AppendTag(w, num, protowire.VarintType)
	return protowire.AppendVarint(w, v)
}

// open starts a nested message field; close ends it at the returned mark.
// The length is reserved as one byte and widened in place when the
// message turns out longer.
func (w wire) open(num protowire.Number) (wire, int) {
	w = protowire.AppendTag(w, num, protowire.BytesType)
	return append(w, 0), len(w)
}

func (w wire) close(mark int) wire {
	n := len(w) - mark - 1
	if n < 0x80 {
		w[mark] = byte(n)
		return w
	}
	size := protowire.SizeVarint(uint64(n))
	w = append(w, make([]byte, size-1)...)
	copy(w[mark+size:], w[mark+1:mark+1+n])
	protowire.AppendVarint(w[:mark], uint64(n))
	return w
}

// message appends a nested message field whose content is already encoded.
func (w wire) message(num protowire.Number, content []byte) wire {
	w = protowire.AppendTag(w, num, protowire.BytesType)
	return protowire.AppendBytes(w, content)
}
