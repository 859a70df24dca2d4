package identity

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// maxInstanceIPs bounds the addresses a proxy may claim.
const maxInstanceIPs = 16

// ErrPodMismatch is logged when a node names a pod that runs under another
// service account than the caller's.
var ErrPodMismatch = errors.New("node names a pod of another service account")

// Workload is what an authenticated node says of its workload, which
// decides how its resources are generated.
type Workload struct {
	Envoy          bool // an Envoy sidecar or router; else proxyless gRPC
	Router         bool // an Envoy gateway (node type "router")
	Unprivileged   bool // a router that may not bind ports below 1024
	Namespace      string
	ServiceAccount string
	Pod            string // the pod its node ID names; "" for none
	Labels         map[string]string
	IPs            []string
	Network        string   // node metadata NETWORK
	NetworkView    []string // node metadata REQUESTED_NETWORK_VIEW (NodeMeta.NetworkView)
	NodeName       string   // node metadata NODE_NAME
	// Locality is the Envoy node's locality, "<region>/<zone>/<subzone>"
	// (pilot-agent's, of the pod's locality label): a workload's when
	// neither its registry pod nor its labels place it.
	Locality string
	// Cluster is the remote cluster that authenticated it, in whose
	// registry its pod is looked up; "" for istiod's own. ClusterID is
	// its cluster's ID, remote or istiod's own.
	Cluster, ClusterID string

	// labelled is the last label map In made, kept until the pod it was
	// made of changes: a pod's new version is a new *model.Pod, and In
	// runs for scope keys and rule visibility on every push.
	labelled atomic.Pointer[labelledPod]
}

// labelledPod is a pod's labels (nil pod: the node's own) with the
// topology labels added for cluster (topologyOf).
type labelledPod struct {
	pod     *model.Pod
	cluster string
	labels  map[string]string
}

// WorkloadOf reads a node whose metadata parsed. The generator is
// chosen as Istio chooses it: GENERATOR=grpc is proxyless gRPC; otherwise
// the node ID's type must be "sidecar", an Envoy sidecar, or "router", an
// Envoy gateway. Both are bound to the pod they name alike.
func WorkloadOf(node *core.Node, meta *NodeMeta) (*Workload, error) {
	w := &Workload{Envoy: meta.Generator != "grpc", Namespace: meta.Namespace, ServiceAccount: meta.ServiceAccount, Labels: meta.Labels,
		Network: meta.Network, NetworkView: meta.NetworkView, NodeName: meta.NodeName, Locality: localityOf(node.GetLocality())}
	typ, ip, id, err := ParseID(node.GetId())
	switch {
	case err != nil && w.Envoy:
		return nil, err
	case err != nil:
		return w, nil // proxyless clients may name themselves freely
	case w.Envoy && typ != "sidecar" && typ != "router":
		return nil, fmt.Errorf("proxy type %q is not served: %w", truncate(typ, 32), ErrBadNode)
	}
	w.Router = w.Envoy && typ == "router"
	w.Unprivileged = w.Router && meta.Unprivileged
	// "<pod>.<namespace>" names a pod, which must be of the node's namespace.
	if pod, ns, ok := strings.Cut(id, "."); ok {
		if ns != meta.Namespace {
			return nil, fmt.Errorf("node ID names namespace %q, metadata %q: %w", truncate(ns, 64), meta.Namespace, ErrBadNode)
		}
		w.Pod = pod
	}
	if w.IPs, err = instanceIPs(meta.InstanceIPs, ip); err != nil && w.Envoy {
		return nil, err
	}
	return w, nil
}

// ParseID reads Istio's "<type>~<ip>~<id>~<domain>".
func ParseID(id string) (typ, ip, name string, err error) {
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

// Check refuses a node that names a pod of the registry running under
// another service account: its identity is not that pod's.
func (w *Workload) Check(snap *model.Snapshot) error {
	if pod := w.RegistryPod(snap); pod != nil && pod.ServiceAccount != w.ServiceAccount {
		return fmt.Errorf("pod %s/%s runs as %q: %w", pod.Namespace, pod.Name, pod.ServiceAccount, ErrPodMismatch)
	}
	return nil
}

// RegistryPod is the pod of snap's registry the node names, if any.
// It is looked up in the registry of w's cluster only: the local registry
// (none in the file model), or the remote cluster's, never another
// cluster's pod of the same name.
func (w *Workload) RegistryPod(snap *model.Snapshot) *model.Pod {
	if w.Pod == "" {
		return nil
	}
	if w.Cluster != "" {
		pod, _ := snap.RemotePod(w.Cluster, w.Namespace, w.Pod)
		return pod
	}
	if !snap.HasPods() {
		return nil
	}
	return snap.Pod(w.Namespace, w.Pod)
}

// In is the workload's labels and addresses in snap: the registry pod's
// when the node names one running under the node's service account; else
// what the node claims. The labels carry the topology labels Istio adds to
// a proxy's (topologyOf): its locality, cluster, node and network.
func (w *Workload) In(snap *model.Snapshot) (labels map[string]string, ips []string) {
	if pod := w.RegistryPod(snap); pod != nil && pod.ServiceAccount == w.ServiceAccount {
		return w.withTopology(pod, pod.Labels), pod.IPs
	}
	return w.withTopology(nil, w.Labels), w.IPs
}

// withTopology is labels, pod's or (nil pod) the node's, with the
// topology labels of topologyOf set, whatever labels say of them: labels
// itself when they add nothing. The result is shared by every call until
// the pod changes; callers do not modify it. Labels that need nothing
// added are handed out without a copy or an allocation.
func (w *Workload) withTopology(pod *model.Pod, labels map[string]string) map[string]string {
	if c := w.labelled.Load(); c != nil && c.pod == pod && c.cluster == w.ClusterID {
		return c.labels
	}
	kv := w.topologyOf(pod, labels)
	if kv.n == 0 {
		return labels
	}
	out := withTopology(labels, &kv)
	w.labelled.Store(&labelledPod{pod: pod, cluster: w.ClusterID, labels: out})
	return out
}

// LabelsIn is the workload's labels in snap (see In).
func (w *Workload) LabelsIn(snap *model.Snapshot) map[string]string {
	labels, _ := w.In(snap)
	return labels
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
