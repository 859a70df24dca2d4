package resource

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Marshal returns r's wire form, deterministic for equal content.
func (r Resource) Marshal() ([]byte, error) {
	if r.Encode != nil {
		return r.Encode()
	}
	m, err := r.Build()
	if err != nil {
		return nil, err
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", r.Name, err)
	}
	return raw, nil
}

// Message returns r, a resource of typeURL, as a client decodes it: the
// message tests inspect, whether r was built as a message or encoded.
func (r Resource) Message(typeURL string) (proto.Message, error) {
	raw, err := r.Marshal()
	if err != nil {
		return nil, err
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(typeURL)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.Name, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.Name, err)
	}
	return m, nil
}

// Preencoded is fields of one message type, marshalled once to be part of
// the wire form of many messages of that type. On the wire, a message
// followed by more of its fields decodes as the two merged: singular
// fields set once each, nested messages merged, repeated fields
// concatenated. So the fields every resource of a kind shares (a
// cluster's type, timeouts, circuit breakers) are marshalled once, not
// once per resource.
type Preencoded []byte

// Preencode marshals m's fields for use as Preencoded.
func Preencode(m proto.Message) (Preencoded, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("preencode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return raw, nil
}
