// Package routes translates VirtualServices into Envoy routes: the virtual
// hosts of a gateway server's route configuration, the SNI-matched
// destinations of a TLS passthrough server and the TCP route of an opaque
// or TLS-terminating TCP server. It is the one translation of the kind:
// the gateway generator calls it, and so do the sidecar generators
// (Scope with Gateway "mesh" and the proxy's namespace and labels;
// sidecar.go: the VirtualServices a sidecar sees, the default route of a
// service without one, what no sidecar gets). For sidecars a destination
// without a port takes the listener's, as Istio's sidecar path does.
//
// Istio's generator is the specification (pilot/pkg/networking/core/route,
// gateway.go, pilot/pkg/model/push_context.go, virtualservice.go and
// virtualservice_controller.go): the same binding (gateways, exportTo, the
// order of private, exported and public VirtualServices), host
// intersection with the server's "ns/host" forms, delegation, route order
// (catch-all routes last), names, collapsed virtual hosts and Envoy
// fields, down to JWT-claim matches, mirrors, retries and per-route fault
// and CORS configuration; test/interop compares the two field by field.
//
// Where this package differs, the difference is a refusal or an order:
//   - A VirtualService with a rule Envoy would reject is left out whole and
//     reported as a Problem, never sent in part: a regex
//     policy.CheckRegex refuses (as the validating webhook does: not RE2,
//     too long, or a program too large for Envoy behind pilot-agent); a route that fails Envoy's validation
//     (ValidateAll); a redirect code Envoy has no action for (Istio sends a
//     route without action); a destination or mirror without a host; a
//     rule whose weights are all zero; a delegate's own delegation; more
//     than the limits of problem.go allow. A host Envoy would refuse as a
//     domain is left out alone.
//   - Query parameter and JWT-claim matchers are sorted (Istio emits them
//     in map order).
//   - A server host "ns/host" with httpsRedirect redirects requests for
//     host (Istio makes a virtual host for the domain "ns/host", which no
//     request matches).
//   - A VirtualService naming one gateway twice is bound once (Istio adds
//     its routes twice).
//
// Not translated (Istio features outside the gateway path of
// networking.istio.io objects): Gateway API semantics (path-separated
// prefixes, 500 for missing backends), the HTTP/3 alt-svc header, the
// stateful-session filter of persistent-session services, inference-pool
// ext_proc, the proxyHeaders settings of the mesh config
// (include_request_attempt_count is always set, as by default;
// x-forwarded-host is never appended). The listener-level parts of a TCP
// or TLS route (tcp_proxy stat prefix, idle timeout, hash policy) are the
// caller's.
//
// Everything returned may share sub-messages (a VirtualService's routes
// share their metadata); it is to be marshalled, not changed. The
// generators take the routes in wire form (WireVirtualHosts,
// MemoWireRoutes): the routes of most VirtualServices are written to it
// straight from their fields (wireroute.go), never built as messages;
// the rest are translated and encoded (encode.go), byte for byte alike.
// A VirtualService whose routes do not encode (a string that is not
// UTF-8) is then left out whole, as one Envoy would refuse.
package routes
