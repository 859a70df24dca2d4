package envoygen

import (
	"slices"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// What a VirtualService or DestinationRule change may change of a
// router's listeners and routes, which its Gateways' servers make: the
// routes of the VirtualServices bound to those Gateways (their delegates
// with them) and what those routes read of the DestinationRules of the
// hosts they route to (subsets, consistent hash). An east-west gateway
// (an AUTO_PASSTHROUGH server) also has a chain per subset of every
// service it sees, which any DestinationRule reaching its namespace may
// add or remove.

// addGateways records the Gateways vs, a root, is bound to.
func (r *Rules) addGateways(vs *model.VirtualService) {
	for _, gw := range routes.Gateways(vs) {
		if gw != routes.Mesh {
			r.addGateway(gw)
		}
	}
}

func (r *Rules) addGateway(gw string) {
	if r.gateways == nil {
		r.gateways = map[string]bool{}
	}
	r.gateways[gw] = true
}

// RouterSeesRules reports whether the rules of r may change router p's
// listeners and routes in snap (the snapshot after the change): a changed
// VirtualService is bound to one of the Gateways that apply to it, or a
// changed DestinationRule's host (maybe a wildcard) matches a host that
// the VirtualServices bound to them (or their delegates) route to, or it
// is an east-west gateway and a changed DestinationRule reaches its
// namespace. A router none of this holds for keeps its listeners and
// routes.
func (g *Generator) RouterSeesRules(snap *model.Snapshot, p *Proxy, r *Rules) bool {
	if r == nil || !p.Router {
		return false
	}
	b := &builder{g: g, snap: snap, p: p}
	gws := b.gateways()
	if len(gws) == 0 {
		return false
	}
	names := make(map[string]bool, len(gws))
	eastWest := false
	for _, gw := range gws {
		names[routes.GatewayName(gw)] = true
		if r.gateways[routes.GatewayName(gw)] {
			return true
		}
		eastWest = eastWest || slices.ContainsFunc(gw.Spec.GetServers(), autoPassthroughServer)
	}
	if len(r.drHosts) == 0 {
		return false
	}
	if eastWest && slices.ContainsFunc(r.drs, func(a model.RuleAudience) bool { return a.Reaches(p.Namespace) }) {
		return true
	}
	routesTo := func(h string) bool {
		return slices.ContainsFunc(r.drHosts, func(dr string) bool { return routes.HostsMatch(dr, h) })
	}
	found := false
	check := func(h string) { found = found || routesTo(h) }
	vss := snap.Resources().VirtualServices
	for _, vs := range vss {
		if vs.Spec == nil || !slices.ContainsFunc(routes.Gateways(vs), func(gw string) bool { return names[gw] }) {
			continue
		}
		routes.DestinationHosts(snap, vs, check)
		for _, d := range vss {
			if len(d.Spec.GetHosts()) == 0 && routes.Delegates(vs, d) {
				routes.DestinationHosts(snap, d, check)
			}
		}
		if found {
			return true
		}
	}
	return false
}
