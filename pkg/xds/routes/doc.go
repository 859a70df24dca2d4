// Package routes translates VirtualServices into Envoy routes: the virtual
// hosts of a gateway server's route configuration, the SNI-matched
// destinations of a TLS passthrough server and the TCP route of an opaque
// or TLS-terminating TCP server. It is the one translation of the kind;
// the gateway generator calls it, and the sidecar generator is to.
//
// Istio's generator is the specification (pilot/pkg/networking/core/route,
// gateway.go, pilot/pkg/model/push_context.go and virtualservice.go): the
// same binding, host intersection, route order, names and Envoy fields.
// Where this package differs, the difference is a refusal: a
// VirtualService Envoy would reject, or with a feature not translated
// here, is left out whole and reported as a Problem, never sent in part.
package routes
