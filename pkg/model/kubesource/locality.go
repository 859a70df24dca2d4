package kubesource

import (
	"cmp"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// nodeLabels are the node labels that place the pods on a node: the only
// ones a cached Node keeps.
var nodeLabels = []string{
	corev1.LabelTopologyRegion, corev1.LabelFailureDomainBetaRegion,
	corev1.LabelTopologyZone, corev1.LabelFailureDomainBetaZone,
	model.SubzoneLabel,
}

// podLocality is the locality a pod's labels name, "" if none.
func podLocality(labels map[string]string) string {
	l, ok := labels[model.LocalityLabel]
	if !ok {
		l = labels[model.LegacyLocalityLabel]
	}
	if strings.Contains(l, "/") {
		return l
	}
	return strings.ReplaceAll(l, ".", "/")
}

// nodeLocality is the locality of the pods on a node with labels, as
// Istio computes it: "<region>/<zone>/<subzone>", parts not set left
// empty, or "" when none is set. A topology.kubernetes.io label wins over
// its deprecated failure-domain.beta.kubernetes.io twin unless its value is
// empty.
func nodeLocality(labels map[string]string) string {
	region := cmp.Or(labels[corev1.LabelTopologyRegion], labels[corev1.LabelFailureDomainBetaRegion])
	zone := cmp.Or(labels[corev1.LabelTopologyZone], labels[corev1.LabelFailureDomainBetaZone])
	subzone := labels[model.SubzoneLabel]
	if region == "" && zone == "" && subzone == "" {
		return ""
	}
	return region + "/" + zone + "/" + subzone
}

// locality is the locality of endpoint e of workload w. The pod's
// locality label wins; else the labels of its node, named by the
// endpoint's nodeName or else the pod's spec.nodeName, give it, even when
// they place it nowhere (""), as in Istio. A node not in the cache (or
// none named) leaves "/<zone>" of the endpoint's zone, or "".
func (p *podLookup) locality(w *workload, e *discoveryv1.Endpoint) string {
	if w.locality != "" {
		return w.locality
	}
	if l, ok := p.nodeLocality(cmp.Or(deref(e.NodeName), w.nodeName)); ok {
		return l
	}
	if z := deref(e.Zone); z != "" {
		return "/" + z
	}
	return ""
}

// topologyLabels is w's labels as Istio labels its endpoints: with the
// region, zone and subzone of its pod's locality (the pod's locality
// label, else its node's labels; not the endpoint's zone) and its node's
// name as kubernetes.io/hostname, each only when set, so that
// DestinationRule subsets may select them. An endpoint no pod names gets
// none of them, as in Istio.
func (p *podLookup) topologyLabels(w *workload) map[string]string {
	if w.locality == "" && w.nodeName == "" {
		return w.labels
	}
	locality := w.locality
	if locality == "" {
		locality, _ = p.nodeLocality(w.nodeName)
	}
	if c := w.placed.Load(); c != nil && c.locality == locality {
		return c.labels
	}
	out := make(map[string]string, len(w.labels)+4)
	maps.Copy(out, w.labels)
	parts := strings.Split(locality, "/")
	for i, key := range []string{corev1.LabelTopologyRegion, corev1.LabelTopologyZone, model.SubzoneLabel} {
		if i < len(parts) && parts[i] != "" {
			out[key] = parts[i]
		}
	}
	if w.nodeName != "" {
		out[corev1.LabelHostname] = w.nodeName
	}
	w.placed.Store(&placedLabels{locality: locality, labels: out})
	return out
}

// placedLabels is a workload's labels with the topology labels of
// locality.
type placedLabels struct {
	locality string
	labels   map[string]string
}

// nodeLocality returns the locality of the pods on the named node, and
// whether the node is known.
func (p *podLookup) nodeLocality(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	l, seen := p.nodes[name]
	if !seen {
		l = nodeLoc{}
		if node, err := p.l.nodes.Get(name); err == nil {
			l = nodeLoc{locality: nodeLocality(node.Labels), known: true}
		}
		p.nodes[name] = l
	}
	return l.locality, l.known
}

// nodeLoc is what a build found of a node.
type nodeLoc struct {
	locality string
	known    bool
}

// trimNode is the part of node the model reads: its name and the labels
// that place its pods; for a node with an external IP, which a NodePort
// gateway's node selector may pick (Istio uses no other node), that IP
// and all its labels. A cluster may have thousands of nodes, each large.
func trimNode(node *corev1.Node) *corev1.Node {
	out := &corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: node.Name, ResourceVersion: node.ResourceVersion}}
	if ip := externalIP(node); ip != "" {
		out.Labels = maps.Clone(node.Labels)
		out.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: ip}}
		return out
	}
	for _, k := range nodeLabels {
		if v, ok := node.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = make(map[string]string, len(nodeLabels))
			}
			out.Labels[k] = v
		}
	}
	return out
}

// externalIP is the node's first external IP, as Istio reads it; "" for
// none.
func externalIP(node *corev1.Node) string {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeExternalIP && a.Address != "" {
			return a.Address
		}
	}
	return ""
}

// sameNode reports whether two trimmed versions of a node are the same to
// the model: a kubelet updates its node's status every few seconds.
func sameNode(a, b *corev1.Node) bool {
	return maps.Equal(a.Labels, b.Labels) && externalIP(a) == externalIP(b)
}
