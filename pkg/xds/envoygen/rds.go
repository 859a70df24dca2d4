package envoygen

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// routes returns the route configuration "<port>" of every port some
// service declares HTTP on: a virtual host per service with that port
// declared HTTP or undeclared (as Istio's IsHTTPOrSniffed), or per host of
// a VirtualService bound to "mesh" that replaces services' default routes
// (meshrds.go), and a catch-all; and, with sniffed, the route
// "<host>:<port>" of every HTTP chain sniffed on a service's own listener.
func (b *builder) routes(sniffed bool) []resource.Resource {
	httpPorts := b.httpPorts()
	byPort := map[uint32][]*model.Service{} // whatever the protocol
	for _, svc := range b.listenerServices() {
		for _, sp := range svc.Ports {
			if l := byPort[sp.Port]; len(l) == 0 || l[len(l)-1] != svc {
				byPort[sp.Port] = append(l, svc)
			}
		}
	}
	fallback := b.fallbackCluster()
	mesh := b.meshVirtualServices()
	scope := b.routeScope(mesh)
	var out []resource.Resource
	for _, port := range httpPorts {
		name := strconv.FormatUint(uint64(port), 10)
		svcs, mesh := byPort[port], mesh
		if l := b.egress().routeListener(port); l != nil {
			svcs, mesh = l.byPort[port], b.listenerVirtualServices(l)
		}
		// Short names depend on the proxy's namespace: "svc" resolves
		// only within it.
		out = append(out, resource.Resource{Name: name, Key: key("rds", name, b.p.Namespace, fallback, scope), Encode: func() ([]byte, error) {
			// Field by field, as proto's deterministic marshalling
			// writes a route configuration: its name, the virtual
			// hosts (encoded directly, see wire.go) and the catch-all,
			// then its other fields.
			w := wire(nil).str(rcName, name)
			w, err := b.appendVirtualHosts(w, port, b.portVirtualHosts(port, svcs, mesh), false)
			if err != nil {
				return nil, fmt.Errorf("route %s: %w", name, err)
			}
			catchAll, err := proto.MarshalOptions{Deterministic: true}.Marshal(&route.RouteConfiguration{
				VirtualHosts: []*route.VirtualHost{catchAllHost(fallback)},
			})
			if err != nil {
				return nil, fmt.Errorf("route %s: %w", name, err)
			}
			return append(append(w, catchAll...), routeConfigurationRest...), nil
		}})
	}
	if !sniffed {
		return out
	}
	seen := map[string]bool{}
	cache := &portHostsCache{}
	for _, e := range b.outboundEntries() {
		if e.route == "" || seen[e.route] {
			continue
		}
		seen[e.route] = true
		port := e.svcPort.Port
		out = append(out, b.sniffedRoute(e.route, e.svc, port, byPort[port], mesh, scope, cache))
	}
	return out
}

// portHostsCache holds the virtual hosts of each port once built, for the
// routes of sniffed listeners, which each take one of them.
type portHostsCache struct {
	mu     sync.Mutex
	byPort map[uint32]*portHosts
}

type portHosts struct {
	once sync.Once
	vhs  []portVHost
}

// get returns the virtual hosts of port, building them once with build.
func (c *portHostsCache) get(port uint32, build func() []portVHost) []portVHost {
	c.mu.Lock()
	if c.byPort == nil {
		c.byPort = map[uint32]*portHosts{}
	}
	e, ok := c.byPort[port]
	if !ok {
		e = &portHosts{}
		c.byPort[port] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.vhs = build() })
	return e.vhs
}

// routeScope is what routes read of the proxy beyond its namespace, as
// part of their keys: its labels, when a VirtualService it sees selects
// clients by theirs or a DestinationRule (whose consistent hash a default route
// takes) does; its namespace too, for the routes of sniffed listeners,
// when a VirtualService or DestinationRule may apply.
func (b *builder) routeScope(mesh *meshVS) string {
	sidecar := b.sidecarKey() // which services and VirtualServices it sees
	if mesh == nil && len(b.snap.Resources().DestinationRules) == 0 && sidecar == "" {
		return ""
	}
	out := appendPart(appendPart(nil, b.p.Namespace), sidecar)
	if (mesh != nil && routes.SelectClients(mesh.vss)) || b.snap.SelectsClients() {
		for _, k := range slices.Sorted(maps.Keys(b.p.Labels)) {
			out = appendPart(appendPart(out, k), b.p.Labels[k])
		}
	}
	return string(out)
}

// sniffedRoute is the route of the HTTP chain sniffed on svc's own
// listener for port: the virtual host of route "<port>" that names svc,
// for any host name (whatever the Host header says, the connection went
// to svc's address), and no catch-all, as Istio's
// getVirtualHostsForSniffedServicePort leaves it.
func (b *builder) sniffedRoute(name string, svc *model.Service, port uint32, svcs []*model.Service, mesh *meshVS, scope string, cache *portHostsCache) resource.Resource {
	return resource.Resource{Name: name, Key: key("rds", name, scope), Encode: func() ([]byte, error) {
		w := wire(nil).str(rcName, name)
		// Without VirtualServices, svc's virtual host is its default
		// route's.
		picked := []portVHost{{name: name, svc: svc}}
		if mesh != nil {
			picked = nil
			for _, vh := range cache.get(port, func() []portVHost { return b.portVirtualHosts(port, svcs, mesh) }) {
				if slices.Contains(vh.domains, svc.Hostname) || slices.Contains(vh.domains, name) {
					picked = append(picked, vh)
				}
			}
		}
		w, err := b.appendVirtualHosts(w, port, picked, len(picked) == 1)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", name, err)
		}
		return append(w, routeConfigurationRest...), nil
	}}
}

// appendVirtualHosts appends vhs to a RouteConfiguration, each for any
// host name when anyHost.
func (b *builder) appendVirtualHosts(w wire, port uint32, vhs []portVHost, anyHost bool) (wire, error) {
	w = slices.Grow(w, virtualHostsSize(vhs, anyHost)+catchAllReserve)
	var retry []byte
	for _, vh := range vhs {
		domains := vh.domains
		if anyHost {
			domains = []string{"*"}
		}
		if vh.routes == nil {
			if retry == nil {
				var err error
				if retry, err = defaultRetryWire(b.g.Mesh.Routes); err != nil {
					return nil, err
				}
			}
			var err error
			if w, err = b.appendVirtualHost(w, vh.svc, port, vh.name, domains, retry); err != nil {
				return nil, err
			}
			continue
		}
		var err error
		w, err = routes.AppendWireVirtualHost(w, rcVirtualHosts, &routes.WireVirtualHost{
			Name: vh.name, Domains: domains, Routes: vh.routes, IncludeRequestAttemptCount: true,
		})
		if err != nil {
			return nil, fmt.Errorf("virtual host %s: %w", vh.name, err)
		}
	}
	return w, nil
}

// defaultRetryWire is the default routes' retry policy marshalled, or an
// empty non-nil slice for none.
func defaultRetryWire(o routes.Options) ([]byte, error) {
	p := o.DefaultRetryPolicy()
	if p == nil {
		return []byte{}, nil
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("retry policy: %w", err)
	}
	return raw, nil
}

// routeConfigurationRest are the fields of a sidecar's route
// configuration after its name and virtual hosts, marshalled.
var routeConfigurationRest = func() []byte {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(&route.RouteConfiguration{
		ValidateClusters:         wrapperspb.Bool(false),
		IgnorePortInHostMatching: true,
		// Istio's: Envoy's default of 4 KiB truncates direct responses.
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
	})
	if err != nil {
		panic(err) // constant input; every test that generates a route runs it
	}
	return raw
}()

// serviceDomains are the names of svc as a client in the proxy's
// namespace may write them, in Istio's order (generateVirtualHostDomains,
// ports ignored as the route configuration ignores them): the FQDN, then
// its alternatives (with a trailing dot; of a Kubernetes service, the
// bare name from its own namespace, "name.ns.svc" and "name.ns"), then
// the VIPs; and the alternatives alone.
func (b *builder) serviceDomains(svc *model.Service) (domains, alt []string) {
	h := svc.Hostname
	// One array for both: h, then alt, then the addresses.
	domains = make([]string, 0, 5+len(svc.Addresses))
	domains = append(domains, h, h+".")
	if short, ok := cutDomainSuffix(h, b.snap.Options.Domain); ok {
		if svc.Namespace == b.p.Namespace {
			domains = append(domains, svc.Name, short+".svc", short)
		} else {
			domains = append(domains, short, short+".svc")
		}
	}
	alt = domains[1:len(domains):len(domains)]
	return append(domains, svc.Addresses...), alt
}

// cutDomainSuffix is strings.CutSuffix(h, ".svc."+domain) without
// making that suffix.
func cutDomainSuffix(h, domain string) (string, bool) {
	rest, ok := strings.CutSuffix(h, domain)
	if !ok {
		return h, false
	}
	return strings.CutSuffix(rest, ".svc.")
}

// appendVirtualHost appends to a RouteConfiguration the virtual host
// name of svc's port for domains: the route routes.DefaultRoute, every
// path to the service's cluster with the default retry policy (retry,
// marshalled; empty for none) and no timeout.
func (b *builder) appendVirtualHost(w wire, svc *model.Service, port uint32, name string, domains []string, retry []byte) (wire, error) {
	portName := strconv.FormatUint(uint64(port), 10)
	var vh, r, dec, action, timeout, grpcTimeout int
	w, vh = w.open(rcVirtualHosts)
	w = w.str(vhName, name)
	for _, d := range domains {
		w = w.str(vhDomains, d)
	}
	// The route's fields in proto's order: its match, decorator and
	// name, then the action (a oneof member); the action's timeouts,
	// retries and hash policy, then its cluster (a oneof member).
	w, r = w.open(vhRoutes)
	w = append(w, defaultMatchWire...)
	w, dec = w.open(routeDecorator)
	w = w.str(decoratorOperation, svc.Hostname+":"+portName+"/*").close(dec)
	w = w.str(routeName, "default")
	w, action = w.open(routeAction)
	w, timeout = w.open(actionTimeout) // zero: no timeout
	w = w.close(timeout)
	if len(retry) > 0 {
		w = w.message(actionRetryPolicy, retry)
	}
	if hp := routes.DefaultHashPolicy(b.snap, svc.Hostname, port, routes.Proxy{Namespace: b.p.Namespace, Labels: b.p.Labels}); hp != nil {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(hp)
		if err != nil {
			return nil, fmt.Errorf("hash policy of %s: %w", svc.Hostname, err)
		}
		w = w.message(actionHashPolicy, raw)
	}
	w, grpcTimeout = w.open(actionMaxGrpcTimeout) // zero: grpc-timeout not bounded
	w = w.close(grpcTimeout)
	w = w.str(actionCluster, resource.ClusterName(svc.Hostname, "", port)).close(action)
	w = w.close(r).varint(vhIncludeRequestAttemptCount, 1)
	return w.close(vh), nil
}

// Field numbers of envoy.config.route.v3.RouteConfiguration and of what
// it nests.
const (
	rcName         = 1  // RouteConfiguration.name
	routeName      = 14 // Route.name
	rcVirtualHosts = 2  // RouteConfiguration.virtual_hosts
	vhName         = 1  // VirtualHost.name
	vhDomains      = 2  // VirtualHost.domains
	vhRoutes       = 3  // VirtualHost.routes
	vhRequireTLS   = 4  // VirtualHost.require_tls
	routeAction    = 2  // Route.route
	actionCluster  = 1  // RouteAction.cluster
	actionTimeout  = 8  // RouteAction.timeout

	vhIncludeRequestAttemptCount = 14 // VirtualHost.include_request_attempt_count
	routeDecorator               = 5  // Route.decorator
	decoratorOperation           = 1  // Decorator.operation
	actionRetryPolicy            = 9  // RouteAction.retry_policy
	actionHashPolicy             = 15 // RouteAction.hash_policy
	actionMaxGrpcTimeout         = 23 // RouteAction.max_grpc_timeout
)

// defaultMatchWire is the match of a virtual host's one route, every
// path, as a field of a Route.
var defaultMatchWire = func() []byte {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(&route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}})
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
			MaxGrpcTimeout:   zeroFetchTimeout,
		}}
	}
	return &route.VirtualHost{Name: name, Domains: []string{"*"}, Routes: []*route.Route{r}, IncludeRequestAttemptCount: true}
}
