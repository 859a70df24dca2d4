// Package ca is Bulwark's certificate authority: it owns the signing key, the
// chain from that key to the roots, and the trust bundle everything else
// subscribes to.
//
// A CA signs with one of two backends. A plugged-in CA is read from a
// directory in Istio's cacerts layout (ca-cert.pem, ca-key.pem,
// cert-chain.pem, root-cert.pem) or the Kubernetes TLS layout (tls.crt,
// tls.key, ca.crt); the directory is watched and a valid new set replaces the
// signer without a restart. Without one, the CA signs with a self-signed root
// kept in a [Store].
//
// The signer and its chain live in one immutable value swapped atomically, so
// [CA.Sign] never sees half of a rotation. Every change publishes a new
// [Bundle] with a higher version to subscribers.
//
// Root rotation is driven apart from signing, by the CA's [Rotator]: it
// moves the rotation state shared by the replicas, and the CA installs the
// signer and bundle each state asks for. [CA.Collectors] are the CA's
// Prometheus collectors.
package ca
