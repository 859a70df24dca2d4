package grpcgen

import (
	"google.golang.org/protobuf/proto"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// route is the configuration the API listener of name refers to: the
// routes of the VirtualService that claims the service (vsroutes.go),
// else every request to the service's one cluster.
func (g *Generator) route(snap *model.Snapshot, p *Proxy, name string) *Resource {
	svc, port, ok := lookup(snap, p.Namespace, name)
	if !ok {
		return nil
	}
	cluster := ClusterName(svc.Hostname, port.Port)
	vhost := &route.VirtualHost{
		Name:    hostPort(svc.Hostname, port.Port),
		Domains: []string{svc.Hostname, hostPort(svc.Hostname, port.Port)},
		Routes: []*route.Route{{
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster},
			}},
		}},
	}
	key := "rds|" + name
	if vs := g.claimingVirtualService(snap, p, svc.Hostname); vs != nil {
		if rs, ok := g.virtualServiceRoutes(snap, p, vs, port.Port); ok {
			vhost.Routes = rs
			// The routes depend on the client's namespace (which
			// VirtualServices it sees) and, through sourceLabels, labels.
			key += "|" + p.Namespace
			if routes.UsesSourceLabels(snap) {
				key += "|" + labelsKey(p.Labels)
			}
		}
	}
	return &Resource{Name: name, Key: key, Build: func() (proto.Message, error) {
		return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{vhost}}, nil
	}}
}
