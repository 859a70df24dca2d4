package grpcgen

import (
	"fmt"
	"net/netip"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	fault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// Filter names.
const (
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
	routerFilterName = "envoy.filters.http.router"
	tlsSocketName    = "envoy.transport_sockets.tls"
)

func (g *Generator) listener(snap *model.Snapshot, p *Proxy, cv clientView, name string) *Resource {
	if ap, ok := parseInbound(name); ok {
		return g.inboundListener(snap, p, name, ap)
	}
	svc, port, ok := lookup(cv, name)
	if !ok {
		return nil
	}
	routeName := hostPort(svc.Hostname, port.Port)
	return &Resource{Name: name, Key: "lds|" + name, Build: func() (proto.Message, error) {
		m, err := anypb.New(&hcm.HttpConnectionManager{
			StatPrefix: routeName,
			RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
				ConfigSource:    adsSource(),
				RouteConfigName: routeName,
			}},
			// The fault filter lets a VirtualService's fault injection,
			// per route, apply, as on Istio's proxyless listeners.
			HttpFilters: []*hcm.HttpFilter{faultFilter(), routerFilter()},
		})
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		return &listener.Listener{Name: name, ApiListener: &listener.ApiListener{ApiListener: m}}, nil
	}}
}

// inboundListener is the server listener for ip:port. Policies are chosen by
// the proxy's namespace and labels, the mTLS mode also by port.
func (g *Generator) inboundListener(snap *model.Snapshot, p *Proxy, name string, ap netip.AddrPort) *Resource {
	port := uint32(ap.Port())
	mode := snap.MTLSMode(p.Namespace, p.Labels, port)
	// gRPC cannot tell TLS from plaintext before the handshake, so
	// PERMISSIVE is served as Istio does for gRPC: mTLS for a workload that
	// advertises it (the label auto-mTLS clients follow), plaintext otherwise.
	if mode == model.MTLSPermissive {
		mode = model.MTLSDisable
		if p.Labels[model.TLSModeLabel] == "istio" {
			mode = model.MTLSStrict
		}
	}
	policies := snap.AuthorizationPolicies(p.Namespace, p.Labels)
	key := fmt.Sprintf("lds|%s|%s|%s|%s", name, p.Namespace, labelsKey(p.Labels), mode)
	return &Resource{Name: name, Key: key, Build: func() (proto.Message, error) {
		filters, err := g.rbacFilters(policies)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		filters = append(filters, routerFilter())
		m, err := anypb.New(&hcm.HttpConnectionManager{
			StatPrefix: "inbound_" + ap.String(),
			RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
				Name: "inbound|" + ap.String(),
				VirtualHosts: []*route.VirtualHost{{
					Name:    "inbound|http|" + ap.String(),
					Domains: []string{"*"},
					Routes: []*route.Route{{
						Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
						Action: &route.Route_NonForwardingAction{NonForwardingAction: &route.NonForwardingAction{}},
					}},
				}},
			}},
			HttpFilters: filters,
		})
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		chain := &listener.FilterChain{
			Name:    "inbound|" + ap.String(),
			Filters: []*listener.Filter{{Name: hcmFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: m}}},
		}
		if mode == model.MTLSStrict {
			ts, err := downstreamTLS()
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", name, err)
			}
			chain.TransportSocket = ts
		}
		return &listener.Listener{
			Name: name,
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address:       ap.Addr().String(),
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
			}}},
			FilterChains:     []*listener.FilterChain{chain},
			TrafficDirection: core.TrafficDirection_INBOUND,
		}, nil
	}}
}

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}

func faultFilter() *hcm.HttpFilter {
	m, _ := anypb.New(&fault.HTTPFault{}) // an empty message always marshals
	return &hcm.HttpFilter{Name: routes.FaultFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: m}}
}

func routerFilter() *hcm.HttpFilter {
	m, _ := anypb.New(&router.Router{}) // an empty message always marshals
	return &hcm.HttpFilter{Name: routerFilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: m}}
}
