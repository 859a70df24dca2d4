package grpcgen

import (
	"google.golang.org/protobuf/proto"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// route is the configuration the API listener of name refers to: the
// routes of the VirtualService that claims the service (vsroutes.go),
// else the default route Istio's generator gives proxyless clients too
// (BuildDefaultHTTPOutboundRoute): every request to the service's one
// cluster, with the mesh's default retry policy (of whose retry_on gRPC
// reads the status codes it knows, unavailable and cancelled among them),
// no timeout, and the consistent hash of the client's DestinationRule.
func (g *Generator) route(snap *model.Snapshot, p *Proxy, cv clientView, name string) *Resource {
	svc, port, ok := lookup(cv, name)
	if !ok {
		return nil
	}
	if !cv.routed(svc.Hostname, port.Port) {
		// Seen only as an imported VirtualService's destination: no
		// virtual host, as Istio answers (scope.go).
		return &Resource{Name: name, Key: "rds|" + name + "|unrouted", Build: func() (proto.Message, error) {
			return &route.RouteConfiguration{Name: name}, nil
		}}
	}
	client := routes.Proxy{Namespace: p.Namespace, Labels: p.Labels}
	vhost := &route.VirtualHost{
		Name:    hostPort(svc.Hostname, port.Port),
		Domains: []string{svc.Hostname, hostPort(svc.Hostname, port.Port)},
		Routes:  []*route.Route{g.Routes.DefaultRoute(snap, svc.Hostname, port.Port, client)},
	}
	key := "rds|" + name
	if routes.DefaultHashPolicy(snap, svc.Hostname, port.Port, client) != nil {
		// The hash is the client's DestinationRule's.
		key += "|dr|" + p.Namespace
		if snap.SelectsClients() {
			key += "|" + labelsKey(p.Labels)
		}
	}
	if vs := g.claimingVirtualService(snap, p, cv, svc.Hostname, port.Port); vs != nil {
		if rs, ok := g.virtualServiceRoutes(snap, p, vs, port.Port); ok {
			vhost.Routes = rs
			// The routes depend on the client's namespace and Sidecar
			// (which VirtualServices it sees) and, through
			// sourceLabels, labels.
			key += "|" + p.Namespace + cv.key()
			if routes.UsesSourceLabels(snap) {
				key += "|" + labelsKey(p.Labels)
			}
		}
	}
	return &Resource{Name: name, Key: key, Build: func() (proto.Message, error) {
		return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{vhost}}, nil
	}}
}
