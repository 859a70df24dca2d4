package interop

import (
	"fmt"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"istio.io/istio/pilot/pkg/simulation"
	"istio.io/istio/pkg/config"
)

type istioconfig = config.Config

// compareGatewayListeners compares, for every listener both generate,
// its listener filters and its filter chains, matched by the route their
// connection manager names: SNI names, the DownstreamTlsContext and the
// connection manager's settings that decide security (client address,
// client certificate headers, path normalization), field by field.
func compareGatewayListeners(d *gatewayDiffs, istioSim, ourSim *simulation.Simulation) {
	d.t.Helper()
	ours := map[string]*listenerv3.Listener{}
	for _, l := range ourSim.Listeners {
		ours[l.GetName()] = l
	}
	for _, il := range istioSim.Listeners {
		ol := ours[il.GetName()]
		if ol == nil {
			continue // compareResourceNames reports it
		}
		name := il.GetName()
		d.check("listener filters of "+name, fmt.Sprint(listenerFilters(il)), fmt.Sprint(listenerFilters(ol)), "")
		ic, oc := chainsByRoute(d, il), chainsByRoute(d, ol)
		d.check("chains of "+name, fmt.Sprint(sortedKeys(ic)), fmt.Sprint(sortedKeys(oc)), "")
		for key, ifc := range ic {
			ofc, ok := oc[key]
			if !ok {
				continue
			}
			subject := name + " " + key
			d.check("SNI of "+subject, fmt.Sprint(ifc.GetFilterChainMatch().GetServerNames()), fmt.Sprint(ofc.GetFilterChainMatch().GetServerNames()), "")
			d.check("handshake timeout of "+subject, ifc.GetTransportSocketConnectTimeout().AsDuration().String(), ofc.GetTransportSocketConnectTimeout().AsDuration().String(), "")
			d.check("TLS context of "+subject, downstreamContext(ifc), downstreamContext(ofc), "")
			d.check("connection manager of "+subject, hcmSecurity(d, ifc), hcmSecurity(d, ofc), "")
			d.check("security filters of "+subject, securityFilters(d, ifc), securityFilters(d, ofc), "")
			if strings.HasPrefix(key, "tcp") {
				d.check("network filters of "+subject, networkFilters(ifc), networkFilters(ofc), "")
			}
		}
	}
}

func listenerFilters(l *listenerv3.Listener) []string {
	var out []string
	for _, f := range l.GetListenerFilters() {
		out = append(out, f.GetName())
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// chainsByRoute keys a listener's chains by the route their connection
// manager names ("tcp" for others).
func chainsByRoute(d *gatewayDiffs, l *listenerv3.Listener) map[string]*listenerv3.FilterChain {
	out := map[string]*listenerv3.FilterChain{}
	for _, fc := range l.GetFilterChains() {
		key := "tcp"
		if m := hcmOf(d, fc); m != nil {
			key = m.GetRds().GetRouteConfigName()
		}
		for i := 2; out[key] != nil; i++ {
			key = fmt.Sprintf("%s#%d", strings.Split(key, "#")[0], i)
		}
		out[key] = fc
	}
	return out
}

func hcmOf(d *gatewayDiffs, fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	for _, f := range fc.GetFilters() {
		if f.GetTypedConfig().GetTypeUrl() == hcmType {
			m := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				d.t.Fatalf("connection manager: %v", err)
			}
			return m
		}
	}
	return nil
}

// downstreamContext is a chain's DownstreamTlsContext in text, or "none".
func downstreamContext(fc *listenerv3.FilterChain) string {
	ts := fc.GetTransportSocket()
	if ts == nil {
		return "none"
	}
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return "undecodable: " + err.Error()
	}
	return ts.GetName() + " " + prototext.MarshalOptions{}.Format(ctx)
}

// hcmSecurity is the part of a chain's connection manager compared: what
// decides the client's address and certificate headers, how paths are
// normalized before routing and RBAC, and the route.
func hcmSecurity(d *gatewayDiffs, fc *listenerv3.FilterChain) string {
	m := hcmOf(d, fc)
	if m == nil {
		return "none"
	}
	sub := &hcmv3.HttpConnectionManager{
		UseRemoteAddress:             m.GetUseRemoteAddress(),
		XffNumTrustedHops:            m.GetXffNumTrustedHops(),
		ForwardClientCertDetails:     m.GetForwardClientCertDetails(),
		SetCurrentClientCertDetails:  m.GetSetCurrentClientCertDetails(),
		NormalizePath:                m.GetNormalizePath(),
		MergeSlashes:                 m.GetMergeSlashes(),
		PathWithEscapedSlashesAction: m.GetPathWithEscapedSlashesAction(),
		StreamIdleTimeout:            m.GetStreamIdleTimeout(),
		UpgradeConfigs:               m.GetUpgradeConfigs(),
		RouteSpecifier:               m.GetRouteSpecifier(),
		CodecType:                    m.GetCodecType(),
		ServerName:                   m.GetServerName(),
		HttpProtocolOptions:          m.GetHttpProtocolOptions(),
	}
	return prototext.MarshalOptions{}.Format(sub)
}

// compareGatewayRoutes compares, for every route configuration both
// generate, its settings and virtual hosts: names, domains, whether they
// redirect to HTTPS, and how many routes.
func compareGatewayRoutes(d *gatewayDiffs, istioSim, ourSim *simulation.Simulation) {
	d.t.Helper()
	ours := map[string]*routev3.RouteConfiguration{}
	for _, r := range ourSim.Routes {
		ours[r.GetName()] = r
	}
	for _, ir := range istioSim.Routes {
		or := ours[ir.GetName()]
		if or == nil {
			continue
		}
		d.check("route settings "+ir.GetName(), routeSettings(ir), routeSettings(or), "")
		d.check("virtual hosts "+ir.GetName(), virtualHosts(ir), virtualHosts(or), "")
		d.check("routes of "+ir.GetName(), routesText(ir), routesText(or), "")
	}
}

// routesText is every virtual host of r with its routes, field by field
// (matches on headers, weights, redirects: what the simulator ignores),
// normalized as TestGatewayRoutesMatchIstio normalizes them.
func routesText(r *routev3.RouteConfiguration) string {
	vhs := normalizeVirtualHosts(r.GetVirtualHosts())
	slices.SortFunc(vhs, func(a, b *routev3.VirtualHost) int { return strings.Compare(a.GetName(), b.GetName()) })
	var out []string
	for _, vh := range vhs {
		out = append(out, prototext.MarshalOptions{Multiline: true}.Format(vh))
	}
	return strings.Join(out, "\n")
}

// networkFilters are the filters of a chain that does not speak HTTP,
// in order, with tcp_proxy's destinations.
func networkFilters(fc *listenerv3.FilterChain) string {
	var out []string
	for _, f := range fc.GetFilters() {
		s := f.GetName()
		if f.GetTypedConfig().GetTypeUrl() == "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy" {
			tp := &tcpproxyv3.TcpProxy{}
			if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
				s += " undecodable: " + err.Error()
			} else {
				s += " " + prototext.MarshalOptions{}.Format(&tcpproxyv3.TcpProxy{ClusterSpecifier: tp.GetClusterSpecifier()})
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func routeSettings(r *routev3.RouteConfiguration) string {
	return prototext.MarshalOptions{}.Format(&routev3.RouteConfiguration{
		ValidateClusters:         r.GetValidateClusters(),
		IgnorePortInHostMatching: r.GetIgnorePortInHostMatching(),
	})
}

func virtualHosts(r *routev3.RouteConfiguration) string {
	var out []string
	for _, vh := range r.GetVirtualHosts() {
		out = append(out, fmt.Sprintf("%s%v tls=%s routes=%d", vh.GetName(), vh.GetDomains(), vh.GetRequireTls(), len(vh.GetRoutes())))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// securityFilters are a chain's HTTP filters that decide who may call, in
// order: ext_authz, jwt_authn and RBAC, each RBAC with its action and
// policies.
func securityFilters(d *gatewayDiffs, fc *listenerv3.FilterChain) string {
	m := hcmOf(d, fc)
	var out []string
	for _, f := range m.GetHttpFilters() {
		switch f.GetTypedConfig().GetTypeUrl() {
		case "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC":
			r := &rbachttp.RBAC{}
			if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
				d.t.Fatalf("RBAC: %v", err)
			}
			out = append(out, fmt.Sprintf("rbac(%s %v)", r.GetRules().GetAction(), sortedKeys(r.GetRules().GetPolicies())))
		case "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication":
			j := &jwtauthn.JwtAuthentication{}
			if err := f.GetTypedConfig().UnmarshalTo(j); err != nil {
				d.t.Fatalf("jwt_authn: %v", err)
			}
			var issuers []string
			for _, p := range j.GetProviders() {
				issuers = append(issuers, p.GetIssuer())
			}
			slices.Sort(issuers)
			out = append(out, fmt.Sprintf("jwt_authn(%v)", issuers))
		case "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz":
			out = append(out, "ext_authz")
		}
	}
	return strings.Join(out, " ")
}
