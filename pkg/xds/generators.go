package xds

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/envoygen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// maxInstanceIPs bounds the addresses a proxy may claim.
const maxInstanceIPs = 16

// ErrPodMismatch is logged when a node names a pod that runs under another
// service account than the caller's.
var ErrPodMismatch = errors.New("node names a pod of another service account")

// generateFunc generates the resources of one type for one proxy.
type generateFunc func(snap *model.Snapshot, typeURL string, names []string, wildcard bool) []resource.Resource

// nodeWorkload is what an authenticated node says of its workload, and
// how its resources are generated.
type nodeWorkload struct {
	envoy          bool // an Envoy sidecar or router; else proxyless gRPC
	router         bool // an Envoy gateway (node type "router")
	unprivileged   bool // a router that may not bind ports below 1024
	namespace      string
	serviceAccount string
	pod            string // the pod its node ID names; "" for none
	labels         map[string]string
	ips            []string
	network        string // node metadata NETWORK
	// cluster is the remote cluster that authenticated it, in whose
	// registry its pod is looked up; "" for istiod's own (proxycluster.go).
	// clusterID is its cluster's ID, remote or istiod's own.
	cluster, clusterID string
}

// nodeWorkloadOf reads a node whose metadata parsed. The generator is
// chosen as Istio chooses it: GENERATOR=grpc is proxyless gRPC; otherwise
// the node ID's type must be "sidecar", an Envoy sidecar, or "router", an
// Envoy gateway. Both are bound to the pod they name alike.
func nodeWorkloadOf(node *core.Node, meta *NodeMeta) (*nodeWorkload, error) {
	w := &nodeWorkload{envoy: meta.Generator != "grpc", namespace: meta.Namespace, serviceAccount: meta.ServiceAccount, labels: meta.Labels, network: meta.Network}
	typ, ip, id, err := parseNodeID(node.GetId())
	switch {
	case err != nil && w.envoy:
		return nil, err
	case err != nil:
		return w, nil // proxyless clients may name themselves freely
	case w.envoy && typ != "sidecar" && typ != "router":
		return nil, fmt.Errorf("proxy type %q is not served: %w", truncate(typ, 32), ErrBadNode)
	}
	w.router = w.envoy && typ == "router"
	w.unprivileged = w.router && meta.Unprivileged
	// "<pod>.<namespace>" names a pod, which must be of the node's namespace.
	if pod, ns, ok := strings.Cut(id, "."); ok {
		if ns != meta.Namespace {
			return nil, fmt.Errorf("node ID names namespace %q, metadata %q: %w", truncate(ns, 64), meta.Namespace, ErrBadNode)
		}
		w.pod = pod
	}
	if w.ips, err = instanceIPs(meta.InstanceIPs, ip); err != nil && w.envoy {
		return nil, err
	}
	return w, nil
}

// parseNodeID reads Istio's "<type>~<ip>~<id>~<domain>".
func parseNodeID(id string) (typ, ip, name string, err error) {
	parts := strings.Split(id, "~")
	if len(parts) != 4 || parts[0] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("node ID %q is not <type>~<ip>~<id>~<domain>: %w", truncate(id, 128), ErrBadNode)
	}
	return parts[0], parts[1], parts[2], nil
}

// instanceIPs are the proxy's addresses: INSTANCE_IPS, else the node ID's.
func instanceIPs(list, fallback string) ([]string, error) {
	if list == "" {
		list = fallback
	}
	fields := strings.Split(list, ",")
	if len(fields) > maxInstanceIPs {
		return nil, fmt.Errorf("%d instance IPs, limit %d: %w", len(fields), maxInstanceIPs, ErrBadNode)
	}
	out := make([]string, 0, len(fields))
	for _, f := range fields {
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("instance IP %q: %w", truncate(f, 64), ErrBadNode)
		}
		out = append(out, a.String())
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// check refuses a node that names a pod of the registry running under
// another service account: its identity is not that pod's.
func (w *nodeWorkload) check(snap *model.Snapshot) error {
	if pod := w.registryPod(snap); pod != nil && pod.ServiceAccount != w.serviceAccount {
		return fmt.Errorf("pod %s/%s runs as %q: %w", pod.Namespace, pod.Name, pod.ServiceAccount, ErrPodMismatch)
	}
	return nil
}

// scope is scopeIn under the mesh configuration in force.
func (w *nodeWorkload) scope(s *Server, snap *model.Snapshot) (key string, gen generateFunc) {
	return w.scopeIn(s, snap, s.mesh.Load())
}

// scopeIn is what generation reads of the workload in snap: in a registry
// of pods, the labels and addresses of the pod the node names when it
// runs under the node's service account; else what the node claims. key
// is all of it, after the generator's name: proxies with equal keys get
// equal resources from one push state. Envoy sidecars generate with ms's
// generator.
func (w *nodeWorkload) scopeIn(s *Server, snap *model.Snapshot, ms *meshState) (key string, gen generateFunc) {
	labels, ips := w.in(snap)
	if !w.envoy {
		gp := &grpcgen.Proxy{Namespace: w.namespace, Labels: labels}
		return "grpc\x00" + labelsKey(w.namespace, labels), func(snap *model.Snapshot, typeURL string, names []string, wildcard bool) []resource.Resource {
			return ms.grpc.Generate(snap, gp, typeURL, names, wildcard)
		}
	}
	ep := &envoygen.Proxy{Namespace: w.namespace, Labels: labels, IPs: ips, Router: w.router, Unprivileged: w.unprivileged, Network: w.network}
	return "envoy\x00" + ms.envoy.Scope(snap, ep), func(snap *model.Snapshot, typeURL string, names []string, wildcard bool) []resource.Resource {
		return ms.envoy.Generate(snap, ep, typeURL, names, wildcard)
	}
}

// endpointsKeyIn is the key under which the workload shares load
// assignments in snap with other proxies (envoygen's EndpointScope): ""
// when it shares them only within its scope.
func (w *nodeWorkload) endpointsKeyIn(snap *model.Snapshot, ms *meshState) string {
	if !w.envoy {
		return ""
	}
	labels, _ := w.in(snap)
	return "envoy\x00" + ms.envoy.EndpointScope(snap, &envoygen.Proxy{Namespace: w.namespace, Labels: labels, Network: w.network})
}

// in is the workload's labels and addresses in snap: the registry pod's
// when the node names one running under the node's service account; else
// what the node claims. The labels name the workload's cluster.
func (w *nodeWorkload) in(snap *model.Snapshot) (labels map[string]string, ips []string) {
	if pod := w.registryPod(snap); pod != nil && pod.ServiceAccount == w.serviceAccount {
		return w.withCluster(pod.Labels), pod.IPs
	}
	return w.withCluster(w.labels), w.ips
}

// labelsIn is the workload's labels in snap (see in).
func (w *nodeWorkload) labelsIn(snap *model.Snapshot) map[string]string {
	labels, _ := w.in(snap)
	return labels
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// labelsKey is a namespace and labels as one unambiguous string.
func labelsKey(namespace string, labels map[string]string) string {
	b := appendField(nil, namespace)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b = appendField(appendField(b, k), labels[k])
	}
	return string(b)
}
