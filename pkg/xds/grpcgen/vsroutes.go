package grpcgen

import (
	"fmt"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// VirtualServices for proxyless gRPC: a VirtualService bound to "mesh"
// that the client's namespace sees and whose host is the most specific
// match of the service's (as for sidecars, meshrds.go of envoygen)
// replaces the route of the service's port. Its routes are the sidecar
// translation's (pkg/xds/routes), with what gRPC's xDS client does with
// them (gRFC A28, A31, A33, A44):
//   - honoured: path prefix, exact and regex matches, header matches,
//     ignoreUriCase, weighted destinations (subsets included, cds.go),
//     timeout (as max_stream_duration, which gRPC reads, as Istio sends
//     it to proxyless clients), fault injection (the fault filter is on
//     every client listener), retries on the gRPC status codes gRPC
//     knows (cancelled, deadline-exceeded, internal, resource-exhausted,
//     unavailable), consistent hash on a header;
//   - not honoured by gRPC, and reported (UnsupportedInVirtualService):
//     query parameter matches (gRPC skips such a route), redirect and
//     direct response (gRPC fails the calls the route matches), rewrite,
//     header operations, mirrors and CORS (ignored).

// claimingVirtualService returns the VirtualService of the client's
// view (its namespace's, that its Sidecar applies to the routes of port)
// whose host is the most specific match of hostname, or nil.
func (g *Generator) claimingVirtualService(snap *model.Snapshot, p *Proxy, cv clientView, hostname string, port uint32) *model.VirtualService {
	if len(snap.Resources().VirtualServices) == 0 {
		return nil
	}
	var vss []*model.VirtualService
	if cv.v != nil {
		vss = cv.v.VirtualServices // those its Sidecar imports, in the same order
	} else {
		vss, _ = g.Routes.MeshVirtualServices(snap, p.Namespace)
	}
	var best *model.VirtualService
	bestHost := ""
	for _, vs := range vss {
		if !cv.appliesOn(vs, port) {
			continue
		}
		for _, h := range routes.Hosts(snap, vs) {
			switch {
			case h == hostname:
				return vs
			case routes.Wildcarded(h) && routes.HostsMatch(h, hostname) && len(h) > len(bestHost):
				best, bestHost = vs, h
			}
		}
	}
	return best
}

// virtualServiceRoutes are vs's routes on port for p, as gRPC takes them:
// timeouts as max_stream_duration. ok is false when vs has no route for
// the port (the default route stays).
func (g *Generator) virtualServiceRoutes(snap *model.Snapshot, p *Proxy, vs *model.VirtualService, port uint32) ([]*route.Route, bool) {
	rs, err := g.Routes.HTTPRoutes(snap, vs, routes.Scope{Port: port, Gateway: routes.Mesh, Proxy: routes.Proxy{Namespace: p.Namespace, Labels: p.Labels}})
	if err != nil {
		return nil, false
	}
	out := make([]*route.Route, 0, len(rs))
	for _, r := range rs {
		r = proto.Clone(r).(*route.Route)
		if a := r.GetRoute(); a != nil {
			timeout := a.GetTimeout()
			if timeout == nil {
				timeout = durationpb.New(0)
			}
			a.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{MaxStreamDuration: timeout}
			a.MaxGrpcTimeout = nil //nolint:staticcheck // gRPC reads max_stream_duration; Istio leaves this unset for it
		}
		out = append(out, r)
	}
	return out, true
}

// UnsupportedInVirtualService lists what of a VirtualService's http rules
// proxyless gRPC clients do not honour, by field path: the fields the
// unsupported-configuration reporter names for gRPC workloads.
func UnsupportedInVirtualService(vs *model.VirtualService) []string {
	var out []string
	for i, r := range vs.Spec.GetHttp() {
		p := fmt.Sprintf("spec.http[%d]", i)
		for j, m := range r.GetMatch() {
			if len(m.GetQueryParams()) > 0 {
				out = append(out, fmt.Sprintf("%s.match[%d].queryParams: gRPC skips the route", p, j))
			}
		}
		add := func(set bool, field, why string) {
			if set {
				out = append(out, p+"."+field+": "+why)
			}
		}
		add(r.GetRedirect() != nil, "redirect", "gRPC fails the calls it matches")
		add(r.GetDirectResponse() != nil, "directResponse", "gRPC fails the calls it matches")
		add(r.GetRewrite() != nil, "rewrite", "ignored by gRPC")
		add(r.GetHeaders() != nil, "headers", "ignored by gRPC")
		add(r.GetMirror() != nil || len(r.GetMirrors()) > 0, "mirror", "ignored by gRPC")
		add(r.GetCorsPolicy() != nil, "corsPolicy", "ignored by gRPC")
		for j, d := range r.GetRoute() {
			add(d.GetHeaders() != nil, fmt.Sprintf("route[%d].headers", j), "ignored by gRPC")
		}
	}
	return out
}
