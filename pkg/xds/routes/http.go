package routes

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// Options are the mesh-wide settings the translation reads. The zero
// value is Istio's defaults.
type Options struct {
	// DefaultRetry is the mesh's defaultHttpRetryPolicy: the retries of a
	// rule that sets none. Nil is Istio's default policy.
	DefaultRetry *networkingv1.HTTPRetry
	// DefaultExportTo is the mesh's defaultVirtualServiceExportTo; empty
	// is "*".
	DefaultExportTo []string
}

// Proxy is the proxy routes are built for.
type Proxy struct {
	Namespace string
	Labels    map[string]string
	// AnySource makes the matches of every client apply (sourceLabels and
	// sourceNamespace are not read): to find what some client gets.
	AnySource bool
}

// Scope is where one VirtualService's HTTP routes are built: the listener
// port, the gateway ("ns/name", or Mesh for sidecars) and whether the
// server terminates TLS (redirects then default to https).
type Scope struct {
	Port    uint32
	Gateway string
	TLS     bool
	Proxy   Proxy
	// every makes every match apply, whatever its port, gateways and
	// source: to find what a VirtualService cannot be translated with.
	every bool
}

// HTTPRoutes translates vs's http rules for scope, in order, stopping
// after the first rule that matches every request. A rule whose match
// names another port or gateway is left out, as Istio leaves it. An error
// means vs is to be left out whole: it has a rule Envoy would reject or
// that this package does not translate, or no rule applies in scope.
func (o Options) HTTPRoutes(snap *model.Snapshot, vs *model.VirtualService, scope Scope) ([]*routev3.Route, error) {
	return o.httpRoutes(snap, vs, scope, nil)
}

func (o Options) httpRoutes(snap *model.Snapshot, vs *model.VirtualService, scope Scope, rs *regexes) ([]*routev3.Route, error) {
	return o.translate(snap, vs, scope, rs, nil)
}

// translate is httpRoutes, noting in deps (when not nil) what it reads of
// snap beyond vs and its options.
func (o Options) translate(snap *model.Snapshot, vs *model.VirtualService, scope Scope, rs *regexes, deps *reads) ([]*routev3.Route, error) {
	out, err := o.build(snap, vs, scope, rs, deps)
	if err != nil {
		return nil, err
	}
	for _, r := range out {
		if err := checkRoute(r); err != nil {
			return nil, fmt.Errorf("route %q is invalid for Envoy: %w", r.GetName(), err)
		}
	}
	return out, nil
}

// build is translate without the final check of each route.
func (o Options) build(snap *model.Snapshot, vs *model.VirtualService, scope Scope, rs *regexes, deps *reads) ([]*routev3.Route, error) {
	if reason := checkBounds(vs.Spec); reason != "" {
		return nil, fmt.Errorf("%s", reason)
	}
	t := translator{o: o, snap: snap, vs: vs, scope: scope, rs: rs, deps: deps}
	var out []*routev3.Route
	for i, rule := range vs.Spec.GetHttp() {
		if rule.GetDelegate() != nil {
			// Delegation is one level deep; RouteVirtualHosts expands the
			// root's, and a delegate's own delegation is refused.
			return nil, fmt.Errorf("http[%d]: delegate left unexpanded (a delegate's own delegation, or HTTPRoutes called on a root)", i)
		}
		if len(rule.GetMatch()) == 0 {
			r, err := t.route(rule, nil)
			if err != nil {
				return nil, fmt.Errorf("http[%d]: %w", i, err)
			}
			out = append(out, r)
			break
		}
		catchAll := false
		for j, m := range rule.GetMatch() {
			if !t.applies(m) {
				continue
			}
			r, err := t.route(rule, m)
			if err != nil {
				return nil, fmt.Errorf("http[%d].match[%d]: %w", i, j, err)
			}
			out = append(out, r)
			if len(out) > MaxRoutes {
				return nil, fmt.Errorf("more than %d routes", MaxRoutes)
			}
			if catchAll = isCatchAll(r); catchAll {
				break
			}
		}
		if catchAll {
			break
		}
	}
	if len(out) == 0 {
		return nil, ErrNoRoutes
	}
	return out, nil
}

// ErrNoRoutes is HTTPRoutes' error when no rule of the VirtualService
// applies in the scope. Not a problem: Istio then leaves the
// VirtualService out silently.
var ErrNoRoutes = errors.New("no routes in scope")

type translator struct {
	o     Options
	snap  *model.Snapshot
	vs    *model.VirtualService
	scope Scope
	meta  *corev3.Metadata // shared by the VirtualService's routes
	rs    *regexes
	deps  *reads // nil: not noted
}

// applies reports whether match m can be met in the scope: its port is
// the listener's, and its gateways name the scope's gateway or, when it
// names none, its source labels and namespace are the proxy's.
func (t *translator) applies(m *networkingv1.HTTPMatchRequest) bool {
	if t.scope.every {
		return true
	}
	if m.GetPort() != 0 && m.GetPort() != t.scope.Port {
		return false
	}
	if gws := m.GetGateways(); len(gws) > 0 {
		for _, g := range gws {
			if resolveGateway(g, t.vs.Namespace) == t.scope.Gateway {
				return true
			}
		}
		return false
	}
	if !model.Matches(m.GetSourceLabels(), t.scope.Proxy.Labels) {
		return false
	}
	return m.GetSourceNamespace() == "" || m.GetSourceNamespace() == t.scope.Proxy.Namespace
}

func (t *translator) route(rule *networkingv1.HTTPRoute, m *networkingv1.HTTPMatchRequest) (*routev3.Route, error) {
	name := rule.GetName()
	if m.GetName() != "" {
		name += "." + m.GetName()
	}
	match, err := routeMatch(m, t.rs)
	if err != nil {
		return nil, err
	}
	out := &routev3.Route{Name: name, Match: match, Metadata: t.metadata()}
	if m.GetStatPrefix() != "" {
		out.StatPrefix = m.GetStatPrefix()
	}
	authority := ""
	if h := rule.GetHeaders(); h != nil {
		ops, err := headerOps(h)
		if err != nil {
			return nil, err
		}
		out.RequestHeadersToAdd, out.ResponseHeadersToAdd = ops.reqAdd, ops.respAdd
		out.RequestHeadersToRemove, out.ResponseHeadersToRemove = ops.reqRemove, ops.respRemove
		authority = ops.authority
	}
	switch {
	case rule.GetRedirect() != nil:
		if err := t.redirect(out, rule.GetRedirect()); err != nil {
			return nil, err
		}
	case rule.GetDirectResponse() != nil:
		directResponse(out, rule.GetDirectResponse())
	default:
		if err := t.forward(out, rule, authority); err != nil {
			return nil, err
		}
	}
	out.Decorator = &routev3.Decorator{Operation: t.operation(out)}
	if rule.GetFault() != nil || rule.GetCorsPolicy() != nil {
		if err := perFilter(out, rule, t.rs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// metadata names the VirtualService a route comes from, as Istio's
// BuildConfigInfoMetadata does (access logs and stats read it). The
// VirtualService's routes share it: what this package returns is not to
// be changed.
func (t *translator) metadata() *corev3.Metadata {
	if t.meta != nil {
		return t.meta
	}
	path := "/apis/networking.istio.io/v1/namespaces/" + t.vs.Namespace + "/virtual-service/" + t.vs.Name
	t.meta = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"istio": {Fields: map[string]*structpb.Value{"config": structpb.NewStringValue(path)}},
	}}
	return t.meta
}

// operation is the route's tracing operation, as Istio's
// GetRouteOperation: "host:port<path>" for one cluster, else
// "<vs name>:<listener port><path>".
func (t *translator) operation(r *routev3.Route) string {
	path := "/*"
	switch p := r.GetMatch().GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		path = p.Prefix + "*"
	case *routev3.RouteMatch_Path:
		path = p.Path
	case *routev3.RouteMatch_SafeRegex:
		path = p.SafeRegex.GetRegex()
	}
	if host, _, port, ok := resource.ParseClusterName(r.GetRoute().GetCluster()); ok {
		return host + ":" + strconv.FormatUint(uint64(port), 10) + path
	}
	return t.vs.Name + ":" + strconv.FormatUint(uint64(t.scope.Port), 10) + path
}

// cluster is the cluster of destination d: its port, else (on a
// gateway) the service's only port, else the listener's.
func (t *translator) cluster(d *networkingv1.Destination) string {
	host, port := t.clusterOf(d)
	return resource.ClusterName(host, d.GetSubset(), port)
}

// clusterOf is the host and port of destination d's cluster, noting in
// t.deps what it reads of the snapshot.
func (t *translator) clusterOf(d *networkingv1.Destination) (string, uint32) {
	host := fqdn(t.snap, d.GetHost(), t.vs.Namespace)
	port := t.scope.Port
	if d.GetPort() != nil {
		port = d.GetPort().GetNumber()
	} else if t.scope.isMesh() {
		// A sidecar looks the destination up among the services of the
		// listener's port (Istio's BuildSidecarOutboundVirtualHosts):
		// found, its one port there is the listener's; not found, the
		// listener's port is taken all the same.
	} else {
		p := singlePort(t.snap, host)
		if t.deps != nil {
			t.deps.ports = append(t.deps.ports, portRead{host: host, port: p})
		}
		if p != 0 {
			port = p
		}
	}
	return host, port
}

// isCatchAll reports whether r matches every request (Istio's
// IsCatchAllRoute): path prefix "/" or regex ".*" and nothing else.
func isCatchAll(r *routev3.Route) bool {
	m := r.GetMatch()
	all := false
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		all = p.Prefix == "/"
	case *routev3.RouteMatch_PathSeparatedPrefix:
		all = p.PathSeparatedPrefix == "/"
	case *routev3.RouteMatch_SafeRegex:
		all = p.SafeRegex.GetRegex() == ".*"
	}
	return all && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && len(m.GetDynamicMetadata()) == 0
}

// notimeout is Envoy's "no timeout".
var notimeout = durationpb.New(0)

func timeoutOf(d *durationpb.Duration) (timeout, grpcMax *durationpb.Duration) {
	if d == nil {
		return notimeout, notimeout
	}
	if d.AsDuration() == 0 {
		return d, notimeout
	}
	return d, d
}

func lower(s string) string { return strings.ToLower(s) }
