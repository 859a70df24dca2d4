package routes

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The wire writer the route encoder (encode.go) builds on: protobuf's
// field encodings, in deterministic marshalling's form.

// encoder appends fields to b; the first error stops it.
type encoder struct {
	b   []byte
	err error
	// metaMsg and metaRaw are the last Metadata encoded: a
	// VirtualService's routes share theirs.
	metaMsg *corev3.Metadata
	metaRaw []byte
}

var errUTF8 = errors.New("string field contains invalid UTF-8")

func (e *encoder) tag(num protowire.Number, t protowire.Type) {
	e.b = protowire.AppendTag(e.b, num, t)
}

// str writes a string field unless empty.
func (e *encoder) str(num protowire.Number, s string) {
	if s != "" {
		e.strAlways(num, s)
	}
}

// strAlways writes a string field, empty or not (a oneof member, a map
// key).
func (e *encoder) strAlways(num protowire.Number, s string) {
	if !utf8.ValidString(s) {
		e.fail(fmt.Errorf("field %d: %w", num, errUTF8))
		return
	}
	e.tag(num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *encoder) strs(num protowire.Number, ss []string) {
	for _, s := range ss {
		e.strAlways(num, s)
	}
}

func (e *encoder) bytes(num protowire.Number, v []byte) {
	if len(v) > 0 {
		e.tag(num, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v)
	}
}

// varint writes a varint field unless zero.
func (e *encoder) varint(num protowire.Number, v uint64) {
	if v != 0 {
		e.varintAlways(num, v)
	}
}

func (e *encoder) varintAlways(num protowire.Number, v uint64) {
	e.tag(num, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
}

func (e *encoder) boolean(num protowire.Number, v bool) {
	if v {
		e.varintAlways(num, 1)
	}
}

func (e *encoder) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// open starts a nested message field; closeAt ends it at the returned
// mark. The length is reserved as one byte and widened in place when the
// message turns out longer.
func (e *encoder) open(num protowire.Number) int {
	e.tag(num, protowire.BytesType)
	e.b = append(e.b, 0)
	return len(e.b)
}

func (e *encoder) closeAt(mark int) {
	n := len(e.b) - mark
	if n < 0x80 {
		e.b[mark-1] = byte(n)
		return
	}
	size := protowire.SizeVarint(uint64(n))
	e.b = append(e.b, make([]byte, size-1)...)
	copy(e.b[mark-1+size:], e.b[mark:mark+n])
	protowire.AppendVarint(e.b[:mark-1], uint64(n))
}

// message writes the message field num whose content write appends;
// when write reports it cannot (a field it does not encode is set, or a
// oneof holds nil), m is marshalled by proto instead.
func (e *encoder) message(num protowire.Number, m proto.Message, write func() bool) {
	start := len(e.b)
	mark := e.open(num)
	if write() {
		e.closeAt(mark)
		return
	}
	e.b = e.b[:start]
	e.marshal(num, m)
}

// marshalContent appends m as proto marshals it.
func (e *encoder) marshalContent(m proto.Message) {
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(e.b, m)
	if err != nil {
		e.fail(fmt.Errorf("marshal: %w", err))
		return
	}
	e.b = out
}

// marshal writes the message field num as proto marshals m; nothing for
// a nil m.
func (e *encoder) marshal(num protowire.Number, m proto.Message) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return
	}
	mark := e.open(num)
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(e.b, m)
	if err != nil {
		e.fail(fmt.Errorf("field %d: %w", num, err))
		return
	}
	e.b = out
	e.closeAt(mark)
}

func (e *encoder) duration(num protowire.Number, d *durationpb.Duration) {
	if d == nil {
		return
	}
	mark := e.open(num)
	e.varint(1, uint64(d.Seconds))
	e.varint(2, uint64(int64(d.Nanos)))
	e.closeAt(mark)
}

func (e *encoder) boolValue(num protowire.Number, v *wrapperspb.BoolValue) {
	if v == nil {
		return
	}
	mark := e.open(num)
	e.boolean(1, v.Value)
	e.closeAt(mark)
}

func (e *encoder) uint32Value(num protowire.Number, v *wrapperspb.UInt32Value) {
	if v == nil {
		return
	}
	mark := e.open(num)
	e.varint(1, uint64(v.Value))
	e.closeAt(mark)
}

func (e *encoder) anyValue(num protowire.Number, a *anypb.Any) {
	mark := e.open(num)
	if a != nil {
		e.str(1, a.TypeUrl)
		e.bytes(2, a.Value)
	}
	e.closeAt(mark)
}

// anyMap writes a map<string, Any>, entries sorted by key.
func (e *encoder) anyMap(num protowire.Number, m map[string]*anypb.Any) {
	var one [1]string
	for _, k := range sortedKeys(m, &one) {
		mark := e.open(num)
		e.strAlways(1, k)
		e.anyValue(2, m[k])
		e.closeAt(mark)
	}
}

// sortedKeys are m's keys, sorted: nil for none, in one (not allocated)
// for one.
func sortedKeys[V any](m map[string]V, one *[1]string) []string {
	switch len(m) {
	case 0:
		return nil
	case 1:
		for k := range m {
			one[0] = k
		}
		return one[:]
	}
	return slices.Sorted(maps.Keys(m))
}
