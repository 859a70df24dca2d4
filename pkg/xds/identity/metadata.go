package identity

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Bounds on what a proxy may claim about itself.
const (
	maxNodeBytes = 64 << 10
	maxLabels    = 256
	// maxNetworkName is meshNetworks' bound on a network's name.
	maxNetworkName = 253
	// maxNetworkView bounds the networks REQUESTED_NETWORK_VIEW names.
	maxNetworkView = 64
	// maxNodeName is Kubernetes' bound on a node's name (a DNS subdomain).
	maxNodeName = 253
)

// ErrBadNode marks node information of the wrong shape.
var ErrBadNode = errors.New("invalid node")

// NodeMeta is the part of Istio's node metadata (keys in brackets) that
// generation and authorization read. A key of another JSON type than
// declared is an error; other keys are ignored, as pilot-agent sends many.
type NodeMeta struct {
	Namespace      string            // NAMESPACE
	ServiceAccount string            // SERVICE_ACCOUNT
	Labels         map[string]string // LABELS
	InstanceIPs    string            // INSTANCE_IPS, comma-separated
	Generator      string            // GENERATOR
	ClusterID      string            // CLUSTER_ID
	// Network is NETWORK: the network the proxy's workload is on, which
	// decides which endpoints it reaches directly and which through a
	// network's gateway. Claiming another changes only that.
	Network string
	// NetworkView is REQUESTED_NETWORK_VIEW (pilot-agent's
	// ISTIO_META_REQUESTED_NETWORK_VIEW), comma-separated: the networks
	// whose endpoints the proxy is sent, besides those of no network;
	// sorted, without duplicates or the empty name. nil: every network,
	// as for an absent or empty value in Istio; empty but not nil (a
	// value of commas alone): no network's but those of none.
	NetworkView []string
	// NodeName is NODE_NAME: the Kubernetes node the proxy runs on
	// (pilot-agent's NODE_NAME, the pod's spec.nodeName), which its
	// workload's kubernetes.io/hostname label is, as in Istio.
	NodeName string
	// Unprivileged is UNPRIVILEGED_POD "true": a router that may not bind
	// ports below 1024.
	Unprivileged bool
}

// ParseNode reads and checks the node of a proxy's first request.
func ParseNode(node *core.Node) (*NodeMeta, error) {
	if node == nil {
		return nil, fmt.Errorf("no node in first request: %w", ErrBadNode)
	}
	if n := proto.Size(node); n > maxNodeBytes {
		return nil, fmt.Errorf("node of %d bytes, limit %d: %w", n, maxNodeBytes, ErrBadNode)
	}
	return ParseMetadata(node.GetMetadata())
}

// ParseMetadata decodes node metadata strictly by type. Keys are matched
// exactly (not case-insensitively), so that no spelling variant of a key can
// shadow the one authorization reads.
func ParseMetadata(md *structpb.Struct) (*NodeMeta, error) {
	f := md.GetFields()
	var m NodeMeta
	var view string
	for key, dst := range map[string]*string{
		"NAMESPACE": &m.Namespace, "SERVICE_ACCOUNT": &m.ServiceAccount, "INSTANCE_IPS": &m.InstanceIPs,
		"GENERATOR": &m.Generator, "CLUSTER_ID": &m.ClusterID, "NETWORK": &m.Network,
		"NODE_NAME": &m.NodeName, "REQUESTED_NETWORK_VIEW": &view,
	} {
		v, ok := f[key]
		if !ok {
			continue
		}
		sv, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, fmt.Errorf("node metadata: %s is not a string: %w", key, ErrBadNode)
		}
		*dst = sv.StringValue
	}
	var unprivileged string
	if v, ok := f["UNPRIVILEGED_POD"]; ok {
		sv, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, fmt.Errorf("node metadata: UNPRIVILEGED_POD is not a string: %w", ErrBadNode)
		}
		unprivileged = sv.StringValue
	}
	m.Unprivileged, _ = strconv.ParseBool(unprivileged) // as Istio: anything but true is false
	if v, ok := f["LABELS"]; ok {
		sv, ok := v.GetKind().(*structpb.Value_StructValue)
		if !ok {
			return nil, fmt.Errorf("node metadata: LABELS is not an object: %w", ErrBadNode)
		}
		labels := sv.StructValue.GetFields()
		if len(labels) > maxLabels {
			return nil, fmt.Errorf("node metadata: %d labels, limit %d: %w", len(labels), maxLabels, ErrBadNode)
		}
		m.Labels = make(map[string]string, len(labels))
		for k, lv := range labels {
			s, ok := lv.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, fmt.Errorf("node metadata: label %q is not a string: %w", k, ErrBadNode)
			}
			m.Labels[k] = s.StringValue
		}
	}
	if len(m.Network) > maxNetworkName {
		return nil, fmt.Errorf("node metadata: NETWORK of %d bytes, limit %d: %w", len(m.Network), maxNetworkName, ErrBadNode)
	}
	var err error
	if m.NetworkView, err = parseNetworkView(view); err != nil {
		return nil, err
	}
	if len(m.NodeName) > maxNodeName {
		return nil, fmt.Errorf("node metadata: NODE_NAME of %d bytes, limit %d: %w", len(m.NodeName), maxNodeName, ErrBadNode)
	}
	if m.Namespace == "" || m.ServiceAccount == "" {
		return nil, fmt.Errorf("node metadata: NAMESPACE and SERVICE_ACCOUNT are required: %w", ErrBadNode)
	}
	if _, err := spiffeid.FromSegments(spiffeid.RequireTrustDomainFromString("x"), "ns", m.Namespace, "sa", m.ServiceAccount); err != nil {
		return nil, fmt.Errorf("node metadata: NAMESPACE or SERVICE_ACCOUNT: %w: %w", ErrBadNode, err)
	}
	return &m, nil
}

// Identity is the SPIFFE ID the metadata claims in trust domain td.
func (m *NodeMeta) Identity(td spiffeid.TrustDomain) (spiffeid.ID, error) {
	id, err := spiffeid.FromSegments(td, "ns", m.Namespace, "sa", m.ServiceAccount)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("node identity: %w: %w", ErrBadNode, err)
	}
	return id, nil
}

// parseNetworkView splits REQUESTED_NETWORK_VIEW as Istio does, at every
// comma, names kept as written; the empty name (no network) is always
// visible, so it is dropped from the list.
func parseNetworkView(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	if n := strings.Count(v, ",") + 1; n > maxNetworkView {
		return nil, fmt.Errorf("node metadata: REQUESTED_NETWORK_VIEW names %d networks, limit %d: %w", n, maxNetworkView, ErrBadNode)
	}
	var out []string
	for name := range strings.SplitSeq(v, ",") {
		if len(name) > maxNetworkName {
			return nil, fmt.Errorf("node metadata: REQUESTED_NETWORK_VIEW network of %d bytes, limit %d: %w", len(name), maxNetworkName, ErrBadNode)
		}
		if name != "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		// Only commas: the view of no network's endpoints but those of
		// none, as Istio's.
		return []string{}, nil
	}
	return out, nil
}
