package identity

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"cmp"
	"maps"
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// topologyOf is what Istio adds to labels, a proxy's workload labels
// (pod's, or with a nil pod the node's LABELS), as key/value pairs, each
// only when its value is set:
//   - region, zone and subzone of the locality: the registry pod's
//     (its locality label, else its node's); else, when labels name none
//     of the three, their locality label, else the Envoy node's locality;
//   - topology.istio.io/cluster, the workload's cluster's ID;
//   - kubernetes.io/hostname, the node metadata NODE_NAME;
//   - topology.istio.io/network when labels name none: the registry pod's
//     (its cluster's), else the node metadata NETWORK.
func (w *Workload) topologyOf(pod *model.Pod, labels map[string]string) topologyPairs {
	var out topologyPairs
	add := func(k, v string) {
		if v != "" && labels[k] != v {
			out.kv[out.n], out.kv[out.n+1] = k, v
			out.n += 2
		}
	}
	locality := ""
	if pod != nil {
		locality = pod.Locality
	}
	if locality == "" && !namesLocality(labels) {
		l, ok := labels[model.LocalityLabel]
		if !ok {
			l = labels[model.LegacyLocalityLabel]
		}
		locality = cmp.Or(l, w.Locality)
	}
	if locality != "" {
		parts := strings.SplitN(locality, "/", 4)
		for i, k := range [...]string{model.RegionLabel, model.ZoneLabel, model.SubzoneLabel} {
			if i < len(parts) {
				add(k, parts[i])
			}
		}
	}
	add(model.ClusterLabel, w.ClusterID)
	add(model.HostnameLabel, w.NodeName)
	if labels[model.NetworkLabel] == "" {
		network := w.Network
		if pod != nil && pod.Network != "" {
			network = pod.Network
		}
		add(model.NetworkLabel, network)
	}
	return out
}

// namesLocality reports whether labels carry any of the region, zone and
// subzone labels, which Istio then reads as the proxy's locality.
func namesLocality(labels map[string]string) bool {
	for _, k := range [...]string{model.RegionLabel, model.ZoneLabel, model.SubzoneLabel} {
		if _, ok := labels[k]; ok {
			return true
		}
	}
	return false
}

// topologyPairs is what topologyOf adds: n strings of kv, key and value
// by turns. A value, so that finding nothing to add allocates nothing.
type topologyPairs struct {
	kv [12]string
	n  int
}

// withTopology is labels with the pairs t set.
func withTopology(labels map[string]string, t *topologyPairs) map[string]string {
	out := make(map[string]string, len(labels)+t.n/2)
	maps.Copy(out, labels)
	for i := 0; i < t.n; i += 2 {
		out[t.kv[i]] = t.kv[i+1]
	}
	return out
}

// localityOf is l as Istio writes a locality: "<region>[/<zone>[/<subzone>]]",
// "" for none.
func localityOf(l *core.Locality) string {
	s := l.GetRegion()
	if l.GetZone() == "" {
		return s
	}
	s += "/" + l.GetZone()
	if l.GetSubZone() == "" {
		return s
	}
	return s + "/" + l.GetSubZone()
}
