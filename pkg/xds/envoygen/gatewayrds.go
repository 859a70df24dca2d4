package envoygen

import (
	"maps"
	"slices"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
			Build: func() (proto.Message, error) {
				rc, _ := b.memoRoute(k, name, servers)
				return rc, nil
			},
		})
	}
	return out
}

// memoRoute is gatewayRoute, built once per snapshot and resource key k.
func (b *builder) memoRoute(k, name string, servers []*gwServer) (*route.RouteConfiguration, []routes.Problem) {
	return b.g.memo.get(b.snap, k, func() (*route.RouteConfiguration, []routes.Problem) {
		return b.gatewayRoute(name, servers)
	})
}

// gatewayRoute is the route configuration name of servers, with what of
// the VirtualServices bound to their Gateways it leaves out: the virtual
// hosts the VirtualService translation gives the servers together (all
// the plaintext HTTP servers of a port share one route configuration,
// and Istio merges their virtual hosts), or, when no host is routed,
// "blackhole:<port>", which answers 404 to every request.
func (b *builder) gatewayRoute(name string, servers []*gwServer) (*route.RouteConfiguration, []routes.Problem) {
	bound := make([]routes.BoundServer, len(servers))
	for i, s := range servers {
		bound[i] = routes.BoundServer{Gateway: s.gw, Server: s.server}
	}
	vhosts, problems := b.g.Mesh.Routes.RouteVirtualHosts(b.snap, bound, routes.Proxy{Namespace: b.p.Namespace, Labels: b.p.Labels})
	return &route.RouteConfiguration{
		Name:                           name,
		VirtualHosts:                   vhosts,
		ValidateClusters:               wrapperspb.Bool(false),
		IgnorePortInHostMatching:       true,
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
	}, problems
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
