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
//
// # Differences from Istio's injector
//
// For the same pod and values, the injected pod is the one Istio's own
// injector (istio.io/istio/pkg/kube/inject with the injection-template.yaml
// and grpc-agent.yaml it ships) produces: same containers in the same
// order, images, arguments, variables, volumes and mounts, probes and their
// rewrite, security contexts, labels and status annotation. test/interop
// checks this field by field. The differences below are deliberate, and
// that test names each where it normalizes it:
//
//   - No istio-ca-crl volume: Istio mounts an optional ConfigMap holding a
//     certificate revocation list at /var/run/secrets/istio/crl. Bulwark's
//     CA publishes no such ConfigMap, so nothing is mounted.
//   - The proxyless gRPC agent (template grpc-agent) runs with the same
//     restricted security context as every istio-proxy (user and group
//     1337, non-root, read-only root file system, no privilege escalation,
//     all capabilities dropped). Istio's template sets none.
//   - A pod is injected once. A pod that already carries
//     sidecar.istio.io/status is left alone, and one that defines its own
//     istio-proxy or istio-init container, or a volume with a name the
//     injector adds, is refused. Istio re-injects the former and merges the
//     latter's container over its template; so it also records
//     proxy.istio.io/overrides, which Bulwark never writes.
//   - PROXY_CONFIG holds the fields Bulwark sets (the discovery address and
//     the pod's proxy.istio.io/config); Istio's holds every field that
//     differs from its defaults. Merged over the defaults, as pilot-agent
//     reads it, the two are the same. ISTIO_META_POD_PORTS is the same JSON
//     without Istio's line breaks.
//   - Only the annotations listed in annotations.go are read, and every
//     value is validated: an invalid one denies admission rather than
//     being rendered. Istio's other annotations (for example
//     sidecar.istio.io/interceptionMode, status.sidecar.istio.io/port,
//     sidecar.istio.io/userVolume and userVolumeMount,
//     sidecar.istio.io/bootstrapOverride, sidecar.istio.io/agentLogLevel,
//     sidecar.istio.io/componentLogLevel, readiness.status.sidecar.istio.io/*,
//     traffic.sidecar.istio.io/includeOutboundPorts) are ignored.
//   - Settings that would give the sidecar more privilege are refused:
//     interception mode TPROXY, global.proxy.privileged, proxyMetadata
//     that replaces a variable the injector sets. Unknown keys in the
//     ConfigMap's config and values are errors.
//   - Templates are built in ("sidecar" and "grpc-agent"); the ConfigMap
//     may name them (templates, aliases, defaultTemplates) but its template
//     text is not rendered.
//   - Probes and HTTP or TCP lifecycle hooks on a port the sidecar does not
//     capture (outside includeInboundPorts, or in excludeInboundPorts) are
//     not rewritten: kubelet reaches the app directly. Istio rewrites them
//     all.
//   - The gRPC agent's service.istio.io/canonical-name label is cut to 63
//     characters like the sidecar's, so that it stays a valid label.
package inject
