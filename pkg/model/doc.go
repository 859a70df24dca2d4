// Package model is the mesh model the xDS generators read: services, their
// endpoints, and the security and traffic policies that apply to them.
//
// A Snapshot is immutable and built once per change; every proxy's
// generation shares it. A Store holds the current snapshot and announces new
// ones. Sources publish snapshots into a Store: FileSource reads a directory
// of YAML manifests (the embedded default, without Kubernetes); package
// kubesource watches a cluster through informers.
//
// # Endpoints
//
// A source may give a Service its endpoints (kubesource does, from
// EndpointSlices); FileSource gives none. Build then adds every
// WorkloadEntry of the service's namespace that the service's selector
// matches, as Istio does for Kubernetes Services, and sorts each port's
// endpoints by address and port.
//
// # File format
//
// Every *.yaml, *.yml or *.json file of the directory (not its
// sub-directories; names starting with "." are skipped, so Kubernetes'
// ..data links are followed through their targets only once) holds one or
// more Kubernetes-style documents separated by "---". Recognised kinds:
//
//   - v1 Service: metadata.name/namespace, spec.selector, spec.clusterIP(s)
//     (the virtual IPs Envoy sidecars intercept for TCP ports; absent for
//     none, "None" for a headless Service, whose clients connect to its
//     endpoints' addresses) and spec.ports (name, port, targetPort as a number,
//     appProtocol; the protocol follows Istio: appProtocol, else the name's
//     prefix), and the annotation networking.istio.io/exportTo (the
//     namespaces that see it; see ParseExportTo). Its hostname is
//     <name>.<namespace>.svc.<domain> (domain defaults to cluster.local).
//   - networking.istio.io/v1 WorkloadEntry: one workload instance. spec
//     (istio.io/api networking/v1) gives address, ports (service port name →
//     the workload's port), labels, serviceAccount, locality and weight. A
//     workload is an endpoint of every Service of its namespace whose
//     selector its labels match. Its label security.istio.io/tlsMode=istio
//     says it accepts Istio mTLS.
//   - security.istio.io/v1 PeerAuthentication, AuthorizationPolicy and
//     RequestAuthentication (read by the Envoy generator only, as
//     proxyless gRPC has no JWT filter).
//   - networking.istio.io/v1 DestinationRule (host, wildcards included,
//     exportTo, workloadSelector, subsets, and the TLS of trafficPolicy and
//     its portLevelSettings; metadata.creationTimestamp orders several
//     rules for one host). Which one applies to a client is
//     Snapshot.DestinationRuleFor's choice, for every generator.
//   - networking.istio.io/v1 Gateway and VirtualService, with
//     metadata.creationTimestamp when given (of conflicting ones the
//     oldest applies, as in Istio). Snapshot.GatewaysFor selects a gateway
//     pod's Gateways as Istio does.
//   - networking.istio.io/v1 Sidecar, with metadata.creationTimestamp
//     (of several that could apply to a workload, the oldest does).
//     Snapshot.SidecarFor chooses a sidecar proxy's as Istio does;
//     ParseEgressHosts reads its egress hosts.
//
// Specs are decoded strictly: an unknown field, a duplicate key, a wrong type
// or an unknown kind rejects the whole directory read, which is logged, and
// the last good snapshot stays in force. A file may hold at most
// MaxFileBytes, the directory at most MaxFiles files.
package model
