package xds

import (
	"fmt"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Codec is the gRPC codec of a server that serves xDS: protobuf, except
// that discovery responses are sent without copying the resources they
// carry. Every proxy of a scope is sent the same marshalled resources
// (pushState); gRPC's own codec would copy all of them into a new buffer
// for each proxy, which at a thousand proxies and a thousand services is
// gigabytes of copying and of short-lived memory per push. Here the
// envelope of each resource is encoded, and its bytes are referenced.
func Codec() encoding.CodecV2 { return codec{encoding.GetCodecV2(proto.Name)} }

type codec struct{ fallback encoding.CodecV2 }

func (codec) Name() string { return proto.Name }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.fallback.Unmarshal(data, v) }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *discovery.DiscoveryResponse:
		if size(m.GetResources(), (*anypb.Any).GetValue) >= referenceBytes {
			return marshalResponse(m, m.GetResources(), responseResourcesField, appendAny)
		}
	case *discovery.DeltaDiscoveryResponse:
		if size(m.GetResources(), func(r *discovery.Resource) []byte { return r.GetResource().GetValue() }) >= referenceBytes {
			return marshalResponse(m, m.GetResources(), deltaResourcesField, appendDeltaResource)
		}
	}
	return c.fallback.Marshal(v)
}

// referenceBytes is the size of resources from which a response references
// them: below it, gRPC's codec copies them into one pooled buffer for less.
const referenceBytes = 16 << 10

// size is the total of the resources' bytes, counted up to referenceBytes.
func size[R any](resources []R, value func(R) []byte) int {
	n := 0
	for _, r := range resources {
		if n += len(value(r)); n >= referenceBytes {
			break
		}
	}
	return n
}

// Field numbers of the discovery messages encoded here.
const (
	responseResourcesField = 2 // DiscoveryResponse.resources
	deltaResourcesField    = 2 // DeltaDiscoveryResponse.resources
	resourceVersionField   = 1 // Resource.version
	resourceAnyField       = 2 // Resource.resource
	resourceNameField      = 3 // Resource.name
	anyTypeURLField        = 1 // Any.type_url
	anyValueField          = 2 // Any.value
)

// appendFunc appends the envelope of resource r to hdr and returns the
// bytes that follow it unchanged (nil when r was encoded whole into hdr).
type appendFunc[R any] func(hdr []byte, r R) ([]byte, []byte, error)

// inlineBytes is the size under which a resource's bytes are copied into
// the envelopes' buffer rather than referenced: copying a few hundred
// bytes costs less than another buffer for gRPC to walk.
const inlineBytes = 512

// marshalResponse encodes m's fields but its resources with protobuf, then
// each resource as a field numbered num: its envelope, then its bytes.
// Protobuf decodes fields in any order, and the resources stay in order.
func marshalResponse[R protobuf.Message](m protobuf.Message, resources []R, num protowire.Number, appendResource appendFunc[R]) (mem.BufferSlice, error) {
	rest, err := protobuf.Marshal(without(m, num))
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	// One allocation for the buffers (a pointer to a SliceBuffer is a
	// Buffer without another) and one for the envelopes, each a slice of
	// it, with the small resources copied in.
	bufs := make([]mem.SliceBuffer, 0, 2+2*len(resources))
	bufs = append(bufs, rest)
	hdrs := make([]byte, 0, len(resources)*160)
	start := 0
	for _, r := range resources {
		var body []byte
		if hdrs, body, err = appendResource(hdrs, r); err != nil {
			return nil, err
		}
		if len(body) < inlineBytes {
			hdrs = append(hdrs, body...)
			continue
		}
		bufs = append(bufs, hdrs[start:len(hdrs):len(hdrs)], body)
		start = len(hdrs)
	}
	if start < len(hdrs) {
		bufs = append(bufs, hdrs[start:])
	}
	out := make(mem.BufferSlice, len(bufs))
	for i := range bufs {
		out[i] = &bufs[i]
	}
	return out, nil
}

// without is a shallow copy of m without field num.
func without(m protobuf.Message, num protowire.Number) protobuf.Message {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != num {
			dst.Set(fd, v)
		}
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	return dst.Interface()
}

// appendAny appends a resources field holding a; a's value follows.
func appendAny(hdr []byte, a *anypb.Any) ([]byte, []byte, error) {
	if len(a.ProtoReflect().GetUnknown()) > 0 {
		return appendWhole(hdr, responseResourcesField, a)
	}
	hdr = protowire.AppendTag(hdr, responseResourcesField, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(anySize(a)))
	return appendAnyPrefix(hdr, a), a.GetValue(), nil
}

// appendDeltaResource appends a resources field holding r, a Resource
// whose only fields are a name, a version and the resource; the
// resource's value follows. Any other Resource is encoded whole.
func appendDeltaResource(hdr []byte, r *discovery.Resource) ([]byte, []byte, error) {
	a := r.GetResource()
	if !plainResource(r) || a == nil || len(a.ProtoReflect().GetUnknown()) > 0 {
		return appendWhole(hdr, deltaResourcesField, r)
	}
	return appendResourceEnvelope(hdr, r.GetName(), r.GetVersion(), a, 0), a.GetValue(), nil
}

// appendResourceEnvelope appends a resources field holding a Resource of
// name, version and a, up to a's value: extra bytes follow the value
// within a.
func appendResourceEnvelope(hdr []byte, name, version string, a *anypb.Any, extra int) []byte {
	anyLen := anySize(a) + extra
	size := stringFieldSize(resourceNameField, name) + stringFieldSize(resourceVersionField, version) +
		protowire.SizeTag(resourceAnyField) + protowire.SizeBytes(anyLen)
	hdr = protowire.AppendTag(hdr, deltaResourcesField, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(size))
	hdr = appendStringField(hdr, resourceVersionField, version)
	hdr = appendStringField(hdr, resourceNameField, name)
	hdr = protowire.AppendTag(hdr, resourceAnyField, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(anyLen))
	return appendAnyPrefix(hdr, a)
}

// plainResource reports whether r sets no field but its name, version and
// resource. TestCodecKnowsEveryResourceField keeps the list of the
// others complete.
func plainResource(r *discovery.Resource) bool {
	return len(r.GetAliases()) == 0 && r.GetTtl() == nil && r.GetCacheControl() == nil &&
		r.GetMetadata() == nil && r.GetResourceName() == nil && len(r.ProtoReflect().GetUnknown()) == 0
}

// appendWhole appends m, marshalled, as field num.
func appendWhole(hdr []byte, num protowire.Number, m protobuf.Message) ([]byte, []byte, error) {
	raw, err := protobuf.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	hdr = protowire.AppendTag(hdr, num, protowire.BytesType)
	return protowire.AppendBytes(hdr, raw), nil, nil
}

// anySize is the encoded size of a, which has no unknown fields.
func anySize(a *anypb.Any) int {
	n := stringFieldSize(anyTypeURLField, a.GetTypeUrl())
	if v := a.GetValue(); len(v) > 0 {
		n += protowire.SizeTag(anyValueField) + protowire.SizeBytes(len(v))
	}
	return n
}

// appendAnyPrefix appends a's fields up to its value's bytes.
func appendAnyPrefix(hdr []byte, a *anypb.Any) []byte {
	hdr = appendStringField(hdr, anyTypeURLField, a.GetTypeUrl())
	if v := a.GetValue(); len(v) > 0 {
		hdr = protowire.AppendTag(hdr, anyValueField, protowire.BytesType)
		hdr = protowire.AppendVarint(hdr, uint64(len(v)))
	}
	return hdr
}

func stringFieldSize(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
