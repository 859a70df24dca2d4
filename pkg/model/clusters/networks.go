package clusters

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// networkKey is an endpoint's cluster and network.
type networkKey struct{ cluster, network string }

// networks counts the model's endpoints by cluster and network, and says
// once, when several networks appear, that Bulwark sends a proxy only the
// endpoints of its own network (model.InNetwork): it has no east-west
// gateways yet, through which Istio reaches the others.
type networks struct {
	log   *slog.Logger
	gauge *prometheus.GaugeVec // bulwark_network_endpoints{cluster,network}
	// counts are each service's, kept while the service is shared.
	counts map[*model.Service]map[networkKey]int
	shown  map[networkKey]bool // the gauge's label sets
	warned map[string]bool     // the networks named in a warning
}

func newNetworks(log *slog.Logger, reg prometheus.Registerer) (*networks, error) {
	n := &networks{log: log, counts: map[*model.Service]map[networkKey]int{}, shown: map[networkKey]bool{},
		warned: map[string]bool{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bulwark_network_endpoints",
			Help: "Endpoints in the mesh model, by cluster and network (topology.istio.io/network; empty: unknown). " +
				"With several networks, a proxy receives only the endpoints of its own network and of none: " +
				"there are no east-west gateways yet, so the others are left out for it.",
		}, []string{"cluster", "network"})}
	if reg != nil {
		if err := reg.Register(n.gauge); err != nil {
			return nil, fmt.Errorf("clusters metrics: %w", err)
		}
	}
	return n, nil
}

// observe counts the endpoints of svcs.
func (n *networks) observe(svcs []*model.Service) {
	total := map[networkKey]int{}
	next := make(map[*model.Service]map[networkKey]int, len(svcs))
	for _, svc := range svcs {
		c, ok := n.counts[svc]
		if !ok {
			c = map[networkKey]int{}
			for _, eps := range svc.Endpoints {
				for _, ep := range eps {
					c[networkKey{ep.Cluster, ep.Network}]++
				}
			}
		}
		next[svc] = c
		for k, v := range c {
			total[k] += v
		}
	}
	n.counts = next
	for k := range n.shown {
		if _, ok := total[k]; !ok {
			n.gauge.DeleteLabelValues(k.cluster, k.network)
			delete(n.shown, k)
		}
	}
	named := map[string]bool{}
	for k, v := range total {
		n.gauge.WithLabelValues(k.cluster, k.network).Set(float64(v))
		n.shown[k] = true
		if k.network != "" {
			named[k.network] = true
		}
	}
	if len(named) < 2 {
		return
	}
	var fresh []string
	for net := range named {
		if !n.warned[net] {
			n.warned[net] = true
			fresh = append(fresh, net)
		}
	}
	if len(fresh) > 0 {
		n.log.Warn("endpoints of several networks: a proxy gets only those of its own network (and of none); "+
			"without east-west gateways, which Bulwark does not generate yet, the others are left out for it",
			"networks", slices.Sorted(maps.Keys(named)), "new", fresh)
	}
}
