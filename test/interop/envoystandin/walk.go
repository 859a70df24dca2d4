package main

import (
	"errors"
	"fmt"

	udpatypev1 "github.com/cncf/xds/go/udpa/type/v1"
	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	// Every extension type Envoy knows must resolve when an Any names
	// it: Istio's list of the extensions of istio-proxy's Envoy, and the
	// configuration of istio-proxy's own istio.stats filter, which that
	// list leaves out.
	_ "istio.io/api/envoy/extensions/stats"
	_ "istio.io/istio/pkg/config/xds"
)

// errUnknownType is an Any of a type the stand-in (as Envoy) does not know.
var errUnknownType = errors.New("didn't find a registered implementation")

// validateTree runs Envoy's proto validation (protoc-gen-validate's
// ValidateAll) on m and on the content of every Any in it, which m's own
// validation does not look into. An Any of an unknown type is an error, as
// Envoy rejects a typed config it has no implementation for.
func validateTree(m proto.Message) error {
	var errs []error
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, err)
		}
	}
	eachAny(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := unpack(a)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if err := validateTree(inner); err != nil {
			errs = append(errs, fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err))
		}
	})
	return errors.Join(errs...)
}

// unpack returns an Any's content.
func unpack(a *anypb.Any) (proto.Message, error) {
	inner, err := a.UnmarshalNew()
	if errors.Is(err, protoregistry.NotFound) {
		return nil, fmt.Errorf("%w for type URL %q", errUnknownType, a.GetTypeUrl())
	}
	if err != nil {
		return nil, fmt.Errorf("typed config %s: %w", a.GetTypeUrl(), err)
	}
	return inner, nil
}

// typedStructURL is the type a TypedStruct configures, which Envoy
// resolves like an Any's; "" for any other message.
func typedStructURL(m proto.Message) string {
	switch ts := m.(type) {
	case *udpatypev1.TypedStruct:
		return ts.GetTypeUrl()
	case *xdstypev3.TypedStruct:
		return ts.GetTypeUrl()
	}
	return ""
}

// eachAny calls fn with every Any directly reachable in m (not inside
// another Any).
func eachAny(m protoreflect.Message, fn func(*anypb.Any)) {
	eachMessage(m, func(sub protoreflect.Message) bool {
		if a, ok := sub.Interface().(*anypb.Any); ok {
			fn(a)
			return false
		}
		return true
	})
}

// eachMessage calls fn with m and every message field in it, depth first;
// fn returning false skips the message's fields.
func eachMessage(m protoreflect.Message, fn func(protoreflect.Message) bool) {
	if !fn(m) {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
				for i := 0; i < v.List().Len(); i++ {
					eachMessage(v.List().Get(i).Message(), fn)
				}
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					eachMessage(mv.Message(), fn)
					return true
				})
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			eachMessage(v.Message(), fn)
		}
		return true
	})
}

// visitDeep calls fn with m and every message inside it, unpacking Anys
// (whose errors validateTree reports, so they are skipped here).
func visitDeep(m proto.Message, fn func(proto.Message)) {
	eachMessage(m.ProtoReflect(), func(sub protoreflect.Message) bool {
		if a, ok := sub.Interface().(*anypb.Any); ok {
			if inner, err := unpack(a); err == nil {
				visitDeep(inner, fn)
			}
			return false
		}
		fn(sub.Interface())
		return true
	})
}
