package envoygen

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// gatewayRoutes are the router's route configurations: "http.<port>" of
// the plaintext HTTP servers of a port, "https.<port>.<portName>.<gw>.<ns>"
// of each terminated HTTPS server.
func (b *builder) gatewayRoutes() []resource.Resource {
	m := b.merged()
	var out []resource.Resource
	for _, name := range slices.Sorted(maps.Keys(m.routes)) {
		servers := m.routes[name]
		out = append(out, resource.Resource{
			Name: name,
			Key:  key("rds", "router", name, b.routerScope()),
			Build: func() (proto.Message, error) {
				return b.gatewayRoute(name, servers), nil
			},
		})
	}
	return out
}

// gatewayRoute is the route configuration name of servers: the virtual
// hosts of each, one per host (the first server's for a host two share),
// or when none has any, "blackhole:<port>", which answers 404 to every
// request.
func (b *builder) gatewayRoute(name string, servers []*gwServer) *route.RouteConfiguration {
	byDomain := map[string]*route.VirtualHost{}
	var vhosts []*route.VirtualHost
	for _, s := range servers {
		for _, vh := range gatewayVirtualHosts(b.snap, s.gw, s.server, b.p.Namespace) {
			if strings.HasPrefix(vh.GetName(), blackholeVhostPrefix) {
				continue
			}
			d := strings.Join(vh.GetDomains(), ",")
			if prev := byDomain[d]; prev != nil {
				if vh.GetRequireTls() == route.VirtualHost_ALL {
					prev.RequireTls = route.VirtualHost_ALL
				}
				continue
			}
			byDomain[d] = vh
			vhosts = append(vhosts, vh)
		}
	}
	if len(vhosts) == 0 {
		vhosts = []*route.VirtualHost{blackholeVirtualHost(servers[0].server.GetPort().GetNumber())}
	}
	vhosts = collapseVirtualHosts(vhosts)
	slices.SortFunc(vhosts, func(x, y *route.VirtualHost) int { return cmp.Compare(x.GetName(), y.GetName()) })
	return &route.RouteConfiguration{
		Name:                           name,
		VirtualHosts:                   vhosts,
		ValidateClusters:               wrapperspb.Bool(false),
		IgnorePortInHostMatching:       true,
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
	}
}

const blackholeVhostPrefix = "blackhole:"

// blackholeVirtualHost takes every host and has no route: Envoy answers
// 404.
func blackholeVirtualHost(port uint32) *route.VirtualHost {
	return &route.VirtualHost{Name: blackholeVhostPrefix + strconv.FormatUint(uint64(port), 10), Domains: []string{"*"}, Routes: []*route.Route{}}
}

// gatewayVirtualHosts are the virtual hosts of one server of gw for a
// router of proxyNamespace, as Istio makes them for a server no
// VirtualService is bound to: for an HTTP server with httpsRedirect, one
// per host that redirects every request to HTTPS; else "blackhole:<port>".
//
// TODO(routes): replaced by routes.GatewayVirtualHosts, the
// VirtualService translation, which has this signature and this output
// without VirtualServices; its problems are then reported with the
// router's.
func gatewayVirtualHosts(_ *model.Snapshot, _ *model.Gateway, srv *networkingv1.Server, _ string) []*route.VirtualHost {
	port := srv.GetPort().GetNumber()
	if !srv.GetTls().GetHttpsRedirect() {
		return []*route.VirtualHost{blackholeVirtualHost(port)}
	}
	var out []*route.VirtualHost
	seen := map[string]bool{}
	for _, h := range srv.GetHosts() {
		if _, name, ok := strings.Cut(h, "/"); ok {
			h = name
		}
		h = strings.ToLower(h)
		if seen[h] {
			continue
		}
		seen[h] = true
		out = append(out, &route.VirtualHost{
			Name:       h + ":" + strconv.FormatUint(uint64(port), 10),
			Domains:    []string{h},
			RequireTls: route.VirtualHost_ALL,
		})
	}
	return out
}

// collapseVirtualHosts merges virtual hosts whose routes and settings are
// equal into one that takes all their domains, as Istio collapses them
// (PILOT_ENABLE_ROUTE_COLLAPSE_OPTIMIZATION): the most specific host's
// (longest first, then alphabetically, wildcards last) keeps its name,
// so that many hosts of one VirtualService cost one copy of its routes.
func collapseVirtualHosts(vhosts []*route.VirtualHost) []*route.VirtualHost {
	sorted := slices.Clone(vhosts)
	slices.SortStableFunc(sorted, func(x, y *route.VirtualHost) int { return moreSpecific(x.GetDomains()[0], y.GetDomains()[0]) })
	var out []*route.VirtualHost
	byContent := map[string]int{} // index in out, by what must be equal to merge
	for _, vh := range sorted {
		k, ok := mergeKey(vh)
		i, seen := byContent[k]
		if !ok || !seen {
			if ok {
				byContent[k] = len(out)
			}
			out = append(out, vh)
			continue
		}
		merged := proto.Clone(out[i]).(*route.VirtualHost)
		merged.Domains = append(merged.Domains, vh.GetDomains()...)
		out[i] = merged
	}
	return out
}

// mergeKey is what two virtual hosts must share to be merged: their
// routes, marshalled, and their settings; false when they do not marshal
// (they are then left alone).
func mergeKey(vh *route.VirtualHost) (string, bool) {
	b := []byte{byte(vh.GetRequireTls()), byte(boolIndex(vh.GetIncludeRequestAttemptCount()))}
	for _, r := range vh.GetRoutes() {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			return "", false
		}
		b = appendPart(b, string(raw))
	}
	return string(b), true
}

// moreSpecific orders host names as Istio's host.MoreSpecific: names
// before wildcards, longer before shorter, then alphabetically.
func moreSpecific(a, b string) int {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && !bw:
		return 1
	case !aw && bw:
		return -1
	case len(a) != len(b):
		return cmp.Compare(len(b), len(a))
	}
	return cmp.Compare(a, b)
}
