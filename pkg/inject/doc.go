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
// injector (istio.io/istio/pkg/kube/inject with the injection-template.yaml,
// grpc-agent.yaml and gateway-injection-template.yaml it ships) produces: same containers in the same
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
//     proxy.istio.io/overrides, which Bulwark never writes. The gateway
//     template is the exception: it takes the pod's own istio-proxy (one,
//     among the containers, as the istio/gateway chart writes it with
//     image "auto") and lays it over the template as Istio does. Each of
//     its lists (env, ports, volumeMounts, ...) may hold at most 128
//     items: the merge's time grows with the square of their length.
//   - The gateway's istio-proxy starts from the same restricted security
//     context as every istio-proxy; Istio's gateway template sets only the
//     user and group. The pod's own settings win over either, so with the
//     gateway chart's defaults the two are the same.
//   - The gateway template always sets the pod's
//     net.ipv4.ip_unprivileged_port_start sysctl: the values have no
//     gateways key (Istio's gateways.securityContext replaces the sysctl).
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
//   - Templates are built in ("sidecar", "grpc-agent" and "gateway"); the
//     ConfigMap may name them (templates, aliases, defaultTemplates) but its
//     template text is not rendered. One template builds the whole proxy: a
//     pod that names two (for example inject.istio.io/templates
//     "gateway,sidecar") is refused. Istio lays the second over the first,
//     which for these two gives a gateway pod with istio-init capturing its
//     traffic, and in this order a proxy that runs as a sidecar.
//   - Probes and HTTP or TCP lifecycle hooks on a port the sidecar does not
//     capture (outside includeInboundPorts, or in excludeInboundPorts) are
//     not rewritten: kubelet reaches the app directly. Istio rewrites them
//     all.
//   - The gRPC agent's and the gateway's service.istio.io/canonical-name
//     label is cut to 63 characters like the sidecar's, so that it stays a
//     valid label.
package inject
