package envoygen

import (
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// routes returns the route configuration "<port>" of every port some
// service declares HTTP on: a virtual host per service with that port
// declared HTTP or undeclared (as Istio's IsHTTPOrSniffed), and a
// catch-all; and the route "<host>:<port>" of every HTTP chain sniffed on
// a service's own listener.
func (b *builder) routes() []resource.Resource {
	httpPorts := b.httpPorts()
	byPort := map[uint32][]*model.Service{}
	for _, svc := range b.snap.Services() {
		for _, sp := range svc.Ports {
			if p := protocolOf(sp); (p.isHTTP() || p == protoAuto) && slices.Contains(httpPorts, sp.Port) {
				byPort[sp.Port] = append(byPort[sp.Port], svc)
			}
		}
	}
	fallback := passthroughCluster
	if b.g.Mesh.RegistryOnly {
		fallback = blackholeCluster
	}
	var out []resource.Resource
	for port, svcs := range byPort {
		name := strconv.FormatUint(uint64(port), 10)
		// Short names depend on the proxy's namespace: "svc" resolves
		// only within it.
		out = append(out, resource.Resource{Name: name, Key: key("rds", name, b.p.Namespace, fallback), Build: func() (proto.Message, error) {
			rc := newRouteConfiguration(name)
			for _, svc := range svcs {
				rc.VirtualHosts = append(rc.VirtualHosts, b.virtualHost(svc, port))
			}
			rc.VirtualHosts = append(rc.VirtualHosts, catchAllHost(fallback))
			return rc, nil
		}})
	}
	seen := map[string]bool{}
	for _, e := range b.outboundEntries() {
		if e.route == "" || seen[e.route] {
			continue
		}
		seen[e.route] = true
		out = append(out, b.sniffedRoute(e.route, e.svc, e.svcPort.Port))
	}
	return out
}

// sniffedRoute is the route of the HTTP chain sniffed on svc's own
// listener for port: svc's virtual host, for any host name (whatever the
// Host header says, the connection went to svc's address), and no
// catch-all, as Istio's getVirtualHostsForSniffedServicePort leaves it.
func (b *builder) sniffedRoute(name string, svc *model.Service, port uint32) resource.Resource {
	return resource.Resource{Name: name, Key: key("rds", name), Build: func() (proto.Message, error) {
		vh := b.virtualHost(svc, port)
		vh.Domains = []string{"*"}
		rc := newRouteConfiguration(name)
		rc.VirtualHosts = []*route.VirtualHost{vh}
		return rc, nil
	}}
}

func newRouteConfiguration(name string) *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name:                     name,
		ValidateClusters:         wrapperspb.Bool(false),
		IgnorePortInHostMatching: true,
		// Istio's: Envoy's default of 4 KiB truncates direct responses.
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
	}
}

// virtualHost routes the names of svc as a client in the proxy's
// namespace may write them: FQDN (also with a trailing dot), "name.ns.svc",
// "name.ns", the bare name from its own namespace, and the VIPs.
func (b *builder) virtualHost(svc *model.Service, port uint32) *route.VirtualHost {
	h := svc.Hostname
	domains := []string{h, h + "."}
	if short, ok := strings.CutSuffix(h, ".svc."+b.snap.Options.Domain); ok {
		if svc.Namespace == b.p.Namespace {
			domains = append(domains, svc.Name)
		}
		domains = append(domains, short+".svc", short)
	}
	domains = append(domains, svc.Addresses...)
	cluster := resource.ClusterName(h, "", port)
	return &route.VirtualHost{
		Name:    h + ":" + strconv.FormatUint(uint64(port), 10),
		Domains: domains,
		Routes: []*route.Route{{
			Name:  "default",
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster},
				Timeout:          zeroFetchTimeout,
			}},
		}},
	}
}

// catchAllHost sends other hosts to fallback: out of the mesh unchanged,
// or nowhere under REGISTRY_ONLY.
func catchAllHost(fallback string) *route.VirtualHost {
	name := "allow_any"
	if fallback == blackholeCluster {
		name = "block_all"
	}
	r := &route.Route{Name: name, Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}}
	if fallback == blackholeCluster {
		r.Action = &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: 502}}
	} else {
		r.Action = &route.Route_Route{Route: &route.RouteAction{
			ClusterSpecifier: &route.RouteAction_Cluster{Cluster: fallback},
			Timeout:          zeroFetchTimeout,
		}}
	}
	return &route.VirtualHost{Name: name, Domains: []string{"*"}, Routes: []*route.Route{r}}
}
