package envoygen

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// gatewayRoutes are the router's route configurations: "http.<port>" of
// the plaintext HTTP servers of a port, "https.<port>.<portName>.<gw>.<ns>"
// of each terminated HTTPS server.
func (b *builder) gatewayRoutes() []resource.Resource {
	m := b.merged()
	var out []resource.Resource
	for _, name := range slices.Sorted(maps.Keys(m.routes)) {
		servers := m.routes[name]
		k := key("rds", "router", name, b.routerScope())
		out = append(out, resource.Resource{
			Name: name,
			Key:  k,
			Encode: func() ([]byte, error) {
				hosts, _ := b.memoRoute(k, name, servers)
				return encodeGatewayRoute(name, hosts)
			},
		})
	}
	return out
}

// memoRoute is gatewayRoute, built once per snapshot and resource key k.
func (b *builder) memoRoute(k, name string, servers []*gwServer) ([]routes.WireVirtualHost, []routes.Problem) {
	return b.g.memo.get(b.snap, k, func() ([]routes.WireVirtualHost, []routes.Problem) {
		return b.gatewayRoute(servers)
	})
}

// gatewayRoute is the virtual hosts of the route configuration of
// servers, with what of the VirtualServices bound to their Gateways it
// leaves out: the virtual hosts the VirtualService translation gives the
// servers together (all the plaintext HTTP servers of a port share one
// route configuration, and Istio merges their virtual hosts), or, when
// no host is routed, "blackhole:<port>", which answers 404 to every
// request.
func (b *builder) gatewayRoute(servers []*gwServer) ([]routes.WireVirtualHost, []routes.Problem) {
	bound := make([]routes.BoundServer, len(servers))
	for i, s := range servers {
		bound[i] = routes.BoundServer{Gateway: s.gw, Server: s.server}
	}
	return b.g.Mesh.Routes.WireVirtualHosts(&b.g.vsMemo, b.snap, bound, routes.Proxy{Namespace: b.p.Namespace, Labels: b.p.Labels})
}

// RouteProblems are the parts of the VirtualServices bound to the
// Gateways of the router p that its routes and TCP and TLS chains leave
// out, and why (a regex Envoy would refuse, a limit passed, SNI names
// routed twice on a port, ...). Every other route keeps serving.
func (g *Generator) RouteProblems(snap *model.Snapshot, p *Proxy) []routes.Problem {
	if !p.Router {
		return nil
	}
	b := &builder{g: g, snap: snap, p: p}
	m := b.merged()
	out := slices.Clone(m.routeProblems)
	scope := b.routerScope()
	for _, name := range slices.Sorted(maps.Keys(m.routes)) {
		_, ps := b.memoRoute(key("rds", "router", name, scope), name, m.routes[name])
		out = append(out, ps...)
	}
	return out
}

// encodeGatewayRoute is the route configuration name of virtual hosts
// hosts in wire form, as proto's deterministic marshalling gives it: its
// name, its virtual hosts, then its other fields (a sidecar's too).
func encodeGatewayRoute(name string, hosts []routes.WireVirtualHost) ([]byte, error) {
	// Sized first, then written once into a buffer of that size.
	total := sizeStr(name) + len(routeConfigurationRest)
	for i := range hosts {
		total += protowire.SizeTag(rcVirtualHosts) + protowire.SizeBytes(hosts[i].Size())
	}
	w := make(wire, 0, total).str(rcName, name)
	for i := range hosts {
		var err error
		if w, err = routes.AppendWireVirtualHost(w, rcVirtualHosts, &hosts[i]); err != nil {
			return nil, fmt.Errorf("route %s: %w", name, err)
		}
	}
	return append(w, routeConfigurationRest...), nil
}

// sizeStr is the size of a string field as wire.str writes it.
func sizeStr(s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(1) + protowire.SizeBytes(len(s))
}
