package envoygen

import (
	"fmt"
	"maps"
	"slices"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
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
			Encode: func() ([]byte, error) {
				rc, _ := b.memoRoute(k, name, servers)
				return encodeGatewayRoute(rc, b.g.vsMemo.Encoded(b.snap))
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
	vhosts, problems := b.g.Mesh.Routes.MemoVirtualHosts(&b.g.vsMemo, b.snap, bound, routes.Proxy{Namespace: b.p.Namespace, Labels: b.p.Labels})
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

// encodeGatewayRoute is rc, a route configuration gatewayRoute built, in
// wire form, as proto's deterministic marshalling gives it: its name,
// its virtual hosts, then its other fields. A virtual host is encoded
// from the fields RouteVirtualHosts sets (name, domains, routes,
// require_tls, include_request_attempt_count), each route as raw has it
// already encoded, or else marshalled here.
func encodeGatewayRoute(rc *route.RouteConfiguration, raw func(*route.Route) []byte) ([]byte, error) {
	rest, err := proto.MarshalOptions{Deterministic: true}.Marshal(&route.RouteConfiguration{
		ValidateClusters:               rc.ValidateClusters,
		IgnorePortInHostMatching:       rc.IgnorePortInHostMatching,
		MaxDirectResponseBodySizeBytes: rc.MaxDirectResponseBodySizeBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", rc.Name, err)
	}
	// Sized first, then written once into a buffer of that size.
	enc := make([][]byte, 0, 4*len(rc.VirtualHosts))
	vhSizes := make([]int, len(rc.VirtualHosts))
	total := sizeStr(rc.Name) + len(rest)
	for i, v := range rc.VirtualHosts {
		n := sizeStr(v.Name)
		for _, d := range v.Domains {
			n += protowire.SizeTag(vhDomains) + protowire.SizeBytes(len(d))
		}
		for _, r := range v.Routes {
			b := raw(r)
			if b == nil {
				if b, err = routes.MarshalRoute(r); err != nil {
					return nil, fmt.Errorf("route %s: virtual host %s: %w", rc.Name, v.Name, err)
				}
			}
			enc = append(enc, b)
			n += protowire.SizeTag(vhRoutes) + protowire.SizeBytes(len(b))
		}
		if v.RequireTls != 0 {
			n += protowire.SizeTag(vhRequireTLS) + protowire.SizeVarint(uint64(v.RequireTls))
		}
		if v.IncludeRequestAttemptCount {
			n += protowire.SizeTag(vhIncludeRequestAttemptCount) + 1
		}
		vhSizes[i] = n
		total += protowire.SizeTag(rcVirtualHosts) + protowire.SizeBytes(n)
	}
	w := make(wire, 0, total).str(vhName, rc.Name) // RouteConfiguration.name is field 1 too
	for i, v := range rc.VirtualHosts {
		w = protowire.AppendTag(w, rcVirtualHosts, protowire.BytesType)
		w = protowire.AppendVarint(w, uint64(vhSizes[i]))
		w = w.str(vhName, v.Name)
		for _, d := range v.Domains {
			w = protowire.AppendTag(w, vhDomains, protowire.BytesType)
			w = protowire.AppendString(w, d)
		}
		for range v.Routes {
			w = w.message(vhRoutes, enc[0])
			enc = enc[1:]
		}
		w = w.varint(vhRequireTLS, uint64(v.RequireTls))
		if v.IncludeRequestAttemptCount {
			w = w.varint(vhIncludeRequestAttemptCount, 1)
		}
	}
	return append(w, rest...), nil
}

// sizeStr is the size of a string field as wire.str writes it.
func sizeStr(s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(1) + protowire.SizeBytes(len(s))
}
