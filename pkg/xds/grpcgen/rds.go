package grpcgen

import (
	"google.golang.org/protobuf/proto"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// route is the configuration the API listener of name refers to: every
// request to the service goes to its one cluster.
func (g *Generator) route(snap *model.Snapshot, p *Proxy, name string) *Resource {
	svc, port, ok := lookup(snap, p.Namespace, name)
	if !ok {
		return nil
	}
	cluster := ClusterName(svc.Hostname, port.Port)
	return &Resource{Name: name, Key: "rds|" + name, Build: func() (proto.Message, error) {
		return &route.RouteConfiguration{
			Name: name,
			VirtualHosts: []*route.VirtualHost{{
				Name:    hostPort(svc.Hostname, port.Port),
				Domains: []string{svc.Hostname, hostPort(svc.Hostname, port.Port)},
				Routes: []*route.Route{{
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_Route{Route: &route.RouteAction{
						ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster},
					}},
				}},
			}},
		}, nil
	}}
}
