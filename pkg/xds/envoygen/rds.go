package envoygen

import (
	"fmt"
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
// catch-all; and, with sniffed, the route "<host>:<port>" of every HTTP
// chain sniffed on a service's own listener.
func (b *builder) routes(sniffed bool) []resource.Resource {
	httpPorts := b.httpPorts()
	byPort := map[uint32][]*model.Service{}
	for _, svc := range b.services() {
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
		out = append(out, resource.Resource{Name: name, Key: key("rds", name, b.p.Namespace, fallback), Encode: func() ([]byte, error) {
			// A virtual host per service, encoded directly (see wire.go),
			// between the configuration's own fields and the catch-all.
			w, err := routeConfigurationWire(name)
			if err != nil {
				return nil, err
			}
			for _, svc := range svcs {
				w = b.appendVirtualHost(w, svc, port, b.domains(svc))
			}
			catchAll, err := proto.MarshalOptions{Deterministic: true}.Marshal(&route.RouteConfiguration{
				VirtualHosts: []*route.VirtualHost{catchAllHost(fallback)},
			})
			if err != nil {
				return nil, fmt.Errorf("route %s: %w", name, err)
			}
			return append(w, catchAll...), nil
		}})
	}
	if !sniffed {
		return out
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
	return resource.Resource{Name: name, Key: key("rds", name), Encode: func() ([]byte, error) {
		w, err := routeConfigurationWire(name)
		if err != nil {
			return nil, err
		}
		return b.appendVirtualHost(w, svc, port, []string{"*"}), nil
	}}
}

// routeConfigurationWire is route configuration name without virtual
// hosts, marshalled.
func routeConfigurationWire(name string) (wire, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(&route.RouteConfiguration{
		Name:                     name,
		ValidateClusters:         wrapperspb.Bool(false),
		IgnorePortInHostMatching: true,
		// Istio's: Envoy's default of 4 KiB truncates direct responses.
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
	})
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", name, err)
	}
	return raw, nil
}

// domains are the names of svc as a client in the proxy's namespace may
// write them: FQDN (also with a trailing dot), "name.ns.svc", "name.ns",
// the bare name from its own namespace, and the VIPs.
func (b *builder) domains(svc *model.Service) []string {
	h := svc.Hostname
	domains := []string{h, h + "."}
	if short, ok := strings.CutSuffix(h, ".svc."+b.snap.Options.Domain); ok {
		if svc.Namespace == b.p.Namespace {
			domains = append(domains, svc.Name)
		}
		domains = append(domains, short+".svc", short)
	}
	return append(domains, svc.Addresses...)
}

// appendVirtualHost appends to a RouteConfiguration the virtual host of
// svc's port for domains: every path to the service's cluster, with no
// timeout.
func (b *builder) appendVirtualHost(w wire, svc *model.Service, port uint32, domains []string) wire {
	portName := strconv.FormatUint(uint64(port), 10)
	var vh, r, action, timeout int
	w, vh = w.open(rcVirtualHosts)
	w = w.str(vhName, svc.Hostname+":"+portName)
	for _, d := range domains {
		w = w.str(vhDomains, d)
	}
	w, r = w.open(vhRoutes)
	w = append(w, defaultRouteWire...)
	w, action = w.open(routeAction)
	w = w.str(actionCluster, resource.ClusterName(svc.Hostname, "", port))
	w, timeout = w.open(actionTimeout) // zero: no timeout
	return w.close(timeout).close(action).close(r).close(vh)
}

// Field numbers of envoy.config.route.v3.RouteConfiguration and of what
// it nests.
const (
	rcVirtualHosts = 2 // RouteConfiguration.virtual_hosts
	vhName         = 1 // VirtualHost.name
	vhDomains      = 2 // VirtualHost.domains
	vhRoutes       = 3 // VirtualHost.routes
	routeAction    = 2 // Route.route
	actionCluster  = 1 // RouteAction.cluster
	actionTimeout  = 8 // RouteAction.timeout
)

// defaultRouteWire is the name and match of a virtual host's one route,
// every path, as fields of a Route.
var defaultRouteWire = func() []byte {
	raw, err := proto.Marshal(&route.Route{Name: "default", Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}})
	if err != nil {
		panic(err) // constant input; every test that generates a route runs it
	}
	return raw
}()

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
