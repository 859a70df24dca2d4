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
// once, when several networks appear, that a proxy reaches only its own
// network's endpoints directly: the others through their network's
// gateways, and not at all those of a network without one.
type networks struct {
	log   *slog.Logger
	gauge *prometheus.GaugeVec // bulwark_network_endpoints{cluster,network}
	// prev are the services last observed, with their counts: a service
	// at the same place is counted once while it is shared.
	prev   []*model.Service
	counts []map[networkKey]int
	total  map[networkKey]int
	shown  map[networkKey]bool // the gauge's label sets
	warned map[string]bool     // the networks named in a warning
}

func newNetworks(log *slog.Logger, reg prometheus.Registerer) (*networks, error) {
	n := &networks{log: log, total: map[networkKey]int{}, shown: map[networkKey]bool{}, warned: map[string]bool{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bulwark_network_endpoints",
			Help: "Endpoints in the mesh model, by cluster and network (topology.istio.io/network; empty: unknown). " +
				"With several networks, a proxy receives the endpoints of its own network and of none, and those of " +
				"another network as that network's gateways; a network without a gateway is left out for it. " +
				"A proxyless gRPC client receives its own network's endpoints (and those of none) alone.",
		}, []string{"cluster", "network"})}
	if reg != nil {
		if err := reg.Register(n.gauge); err != nil {
			return nil, fmt.Errorf("clusters metrics: %w", err)
		}
	}
	return n, nil
}

// observe counts the endpoints of svcs. It costs a pointer comparison per
// service, and a count of the endpoints of those not at the same place as
// in the last call.
func (n *networks) observe(svcs []*model.Service) {
	if len(svcs) != len(n.prev) {
		n.prev, n.counts = n.prev[:0], n.counts[:0]
		clear(n.total)
		for _, svc := range svcs {
			c := countNetworks(svc)
			n.prev, n.counts = append(n.prev, svc), append(n.counts, c)
			add(n.total, c, 1)
		}
	} else {
		changed := false
		for i, svc := range svcs {
			if svc == n.prev[i] {
				continue
			}
			changed = true
			c := countNetworks(svc)
			add(n.total, n.counts[i], -1)
			add(n.total, c, 1)
			n.prev[i], n.counts[i] = svc, c
		}
		if !changed {
			return
		}
	}
	total := n.total
	for k := range n.shown {
		if total[k] == 0 {
			n.gauge.DeleteLabelValues(k.cluster, k.network)
			delete(n.shown, k)
		}
	}
	named := map[string]bool{}
	for k, v := range total {
		if v == 0 {
			delete(total, k)
			continue
		}
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
		n.log.Warn("endpoints of several networks: a proxy reaches those of its own network (and of none) directly, "+
			"the others through their network's gateways (meshNetworks, or a Service labelled topology.istio.io/network); "+
			"a network without a gateway is left out for the others; proxyless gRPC clients get the endpoints of their own network "+
			"(and of none) alone, never another network's gateways",
			"networks", slices.Sorted(maps.Keys(named)), "new", fresh)
	}
}

// countNetworks counts svc's endpoints by cluster and network; nil when it
// has none.
func countNetworks(svc *model.Service) map[networkKey]int {
	var c map[networkKey]int
	for _, eps := range svc.Endpoints {
		for _, ep := range eps {
			if c == nil {
				c = map[networkKey]int{}
			}
			c[networkKey{ep.Cluster, ep.Network}]++
		}
	}
	return c
}

// add adds sign times counts c to total.
func add(total, c map[networkKey]int, sign int) {
	for k, v := range c {
		total[k] += sign * v
	}
}
