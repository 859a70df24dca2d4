// Package inject is istiod's sidecar injector: a mutating admission webhook
// that adds Istio's istio-proxy (and istio-init) to pods, with Istio's names
// for every container, variable, volume, label and annotation, so the real
// proxyv2 image runs unchanged against this istiod.
//
// Inject is pure: it takes a pod and Params and returns a JSON patch. The
// sidecar is assembled as typed Kubernetes objects from validated values;
// no text template is rendered, so no annotation or label value can add or
// change a field. Only an allow-list of annotations is honoured, and an
// invalid value denies admission with a message naming the annotation.
//
// Store holds the parsed istio-sidecar-injector ConfigMap and swaps it
// atomically; NewHandler serves the webhook over HTTP.
package inject
