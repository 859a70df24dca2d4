// Package interop holds tests in which real Istio code (its citadel CA
// client, CSR helpers and gRPC TLS options) is the peer of a real istiod
// process built from this repository. See README.md.
package interop
