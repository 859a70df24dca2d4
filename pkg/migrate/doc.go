// Package migrate tells what moving a running mesh from Istio's istiod to
// Bulwark meets, before and during the move.
//
// Check is the preflight `istiod migrate check` runs against a cluster:
// every Istio object Bulwark would not honour in full (the same list the
// unsupported-config reporter keeps, from package policy), the control
// planes and injection webhooks installed and their revisions, the
// namespaces labelled for injection and by which revision, and the CA:
// whether a plugged-in cacerts or Istio's istio-ca-secret is there, and
// which root Bulwark would sign under (the choice package ca makes). A
// Finding that blocks the move makes the command fail.
//
// Proxies watches the pods whose injected istio-proxy does not take the
// trust bundle over xDS (PROXY_CONFIG_XDS_AGENT off, as Istio's injector
// leaves it): a root rotation reaches them only when they restart, and
// while they are connected to Istio's istiod a rotation does not see them
// at all. istiod counts them in a metric; `istiod ca status` and Check
// name them.
package migrate
