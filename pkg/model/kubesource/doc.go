// Package kubesource builds the mesh model from a Kubernetes cluster.
//
// A Source watches, cluster-wide, core/v1 Services, Pods and Nodes,
// discovery.k8s.io/v1 EndpointSlices, security.istio.io/v1
// PeerAuthentication, AuthorizationPolicy and RequestAuthentication, and
// networking.istio.io/v1 DestinationRule, Gateway, VirtualService,
// ServiceEntry and Sidecar, and telemetry.istio.io/v1 Telemetry (their
// creation times too: of conflicting ones, the oldest applies). Once every cache has synced it
// publishes a model.Snapshot, and again after changes: events coalesce into
// at most one rebuild per Config.Delay, and handlers never block. A
// snapshot's version is a hash of its content, so a rebuild that changes
// nothing (a resync, a pod status update the model does not read) publishes
// nothing. Pod and node updates that change nothing the model reads (a
// node's status heartbeat, every few seconds per node) do not even rebuild.
// Snapshots are copies: nothing in them is shared with the informers'
// caches.
//
// A rebuild costs what changed. Each event names the objects it changed;
// a rebuild makes again only those, and the services whose endpoints read
// a changed pod (by name, or by address for endpoints that name none), or
// every service when a node's placing labels changed. Everything else,
// and its part of the version hash, is kept from the last rebuild and
// shared between snapshots, which model.Diff then tells apart by pointer.
// A cache read for the first time (an Istio kind whose CRD appeared) is
// read whole.
//
// # Istio CRDs
//
// The Istio kinds are read only once their CRDs are installed, as Istio's
// istiod does. Before starting their informers, Run asks the apiserver's
// discovery which of them it serves; one it does not serve reads as empty
// and is logged once (a Warn naming the CRD). Run asks again every
// Config.CRDPoll for those still missing; when one appears it starts
// watching it, and its objects enter the model only once its cache has
// synced, never as a partial list (a DENY policy missing from a partial
// list would allow for a while what it denies).
//
// Absence is never assumed. While discovery fails (for a reason other than
// the group version being unknown), the source does not sync and retries
// every CRDPoll. A kind that is served but whose cache does not sync, for
// example because RBAC forbids listing it, keeps the source from syncing,
// so istiod stays unready rather than publish a model without policies it
// could not read; Run logs the caches still pending every
// Config.SyncReport. Once synced, the source stays synced: a kind installed
// later whose cache does not sync is logged the same way, and the model
// keeps lacking that kind, as it did before its CRD existed. Discovery is
// not asked again about kinds already watched: a CRD deleted while the
// source runs leaves its informer retrying its list and watch, and logging
// the failures.
//
// # Services and endpoints
//
// Every Service is in the model, headless and ExternalName ones included;
// its ports keep a numeric targetPort as TargetPort and a named one as
// TargetPortName, and appProtocol, when set, as Protocol (else the
// protocol). Its endpoints come only from the EndpointSlices labelled
// kubernetes.io/service-name with its name, as Istio reads them:
//
//   - an endpoint counts when it is ready (conditions.ready unset or true)
//     and not terminating; each of its addresses is one model endpoint for
//     every service port whose name the slice has a port for; slices of
//     addressType FQDN are skipped; an address listed twice counts once;
//   - a targetRef to a Pod gives the endpoint that pod's labels (so its
//     security.istio.io/tlsMode), its service account ("default" when
//     unset) and namespace. When that pod is not in the cache yet, the
//     endpoint is left out, as Istio does, rather than published without an
//     identity; the pod's arrival adds it. Stricter than Istio, a targetRef
//     to a pod of another namespace than the slice's, or whose UID is not
//     the cached pod's, also leaves the endpoint out;
//   - without a Pod targetRef (a hand-made slice), the pod of the slice's
//     namespace with that IP gives labels and service account; with no such
//     pod, or several (host network), the endpoint has no labels and no
//     service account, as in Istio: it is not an Istio mTLS peer;
//   - the locality is computed as Istio computes a pod's. The pod's
//     topology.istio.io/locality label, or when absent its istio-locality
//     label, names it, dots read as slashes unless it has slashes; an
//     empty value names none. Else the node named by the endpoint's
//     nodeName, or else by the pod's spec.nodeName, gives
//     "<region>/<zone>/<subzone>" from its labels
//     topology.kubernetes.io/region and topology.kubernetes.io/zone (each,
//     when unset or empty, from its deprecated
//     failure-domain.beta.kubernetes.io twin) and topology.istio.io/subzone,
//     parts not set left empty; a node with none of them gives "", whatever
//     the endpoint's zone. A node not in the cache, or none named, leaves
//     "/<zone>" from the endpoint's zone, or "" (Istio gives ""). Unlike
//     Istio, an endpoint without a pod is placed by its nodeName's node;
//   - every endpoint has weight 1.
//
// The source reads no WorkloadEntries; model.Build would add those a
// Service selects.
//
// # Clusters and networks
//
// With Config.ClusterID set, every endpoint names that cluster
// (model.Endpoint.Cluster) and carries it as label
// topology.istio.io/cluster, as Istio augments an endpoint's labels, so
// that DestinationRule subsets can select a cluster. Its network
// (model.Endpoint.Network) is its pod's topology.istio.io/network label,
// else Config.Network; a network the pod does not name is added to its
// labels too. With Config.EndpointsOnly the source reads a remote
// cluster's part of the model: Services, EndpointSlices, Pods and Nodes,
// never the Istio kinds, and asks no discovery (package clusters merges
// such sources with the local one).
//
// # Memory
//
// Pods are cached trimmed to name, namespace, UID, labels, deletion mark,
// service account, node name, phase and IPs; Nodes to their name and the
// five labels above that place their pods; Services and EndpointSlices
// lose annotations; every object loses its managed fields.
//
// # Bad content
//
// Policies are copied as the apiserver serves them; judging them (an
// AuthorizationPolicy a generator cannot express) is the generators' job.
// An AuthorizationPolicy annotated istio.io/dry-run: "true" is left out:
// Istio only logs what it would decide, and the generators cannot dry-run,
// so enforcing it would deny what its author meant only to observe.
// Objects of any shape (nil selectors, no ports, endpoints without
// addresses, out-of-range ports, slices without the service-name label)
// are read without panicking; what cannot be an endpoint is skipped.
package kubesource
