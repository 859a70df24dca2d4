// Package grpcgen generates xDS resources for proxyless gRPC workloads with
// Istio's naming conventions, so Istio's pilot-agent bootstrap and existing
// applications work unchanged:
//
//   - client side, for target xds:///<host>:<port>: an API listener named
//     "<host>:<port>" (HCM with RDS), a route configuration of the same
//     name, and an EDS cluster "outbound|<port>||<host>" whose load
//     assignment has the same name;
//   - server side: a listener "xds.istio.io/grpc/lds/inbound/<ip>:<port>"
//     whose address is that ip:port, with an inline route using
//     NonForwardingAction and RBAC filters from AuthorizationPolicies.
//
// TLS refers only to certificate-provider instances, named as pilot-agent's
// gRPC bootstrap names them: "default" for the workload certificate and its
// roots (certificate name "ROOTCA").
package grpcgen

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Type URLs of the resources generated.
const (
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
)

// InboundPrefix starts the name of a server listener, as pilot-agent's
// server_listener_resource_name_template writes it.
const InboundPrefix = "xds.istio.io/grpc/lds/inbound/"

// Certificate-provider instance and certificate names.
const (
	ProviderInstance = "default"
	IdentityCertName = "default"
	RootCertName     = "ROOTCA"
)

// Proxy is what generation needs to know of the requesting workload.
type Proxy struct {
	Namespace string
	Labels    map[string]string
	// NetworkView (node metadata REQUESTED_NETWORK_VIEW) restricts the
	// endpoints it is sent to those of these networks and of none, as
	// Istio's endpoint builder; nil: every network.
	NetworkView []string
}

// Resource is one generated resource.
type Resource = resource.Resource

// Generator generates resources for proxyless gRPC.
type Generator struct {
	TrustDomain spiffeid.TrustDomain
	// Routes are the mesh settings of VirtualService translation (mesh
	// config defaultHttpRetryPolicy and defaultVirtualServiceExportTo).
	Routes routes.Options
}

// Generate returns the resources of typeURL that proxy asked for in names
// (all it may see when wildcard). Names that do not exist are left out.
// Unknown type URLs give nothing.
func (g *Generator) Generate(snap *model.Snapshot, p *Proxy, typeURL string, names []string, wildcard bool) []Resource {
	cv := g.view(snap, p)
	if wildcard {
		names = append(slices.Clone(names), allNames(cv, typeURL)...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var out []Resource
	for _, n := range names {
		var r *Resource
		switch typeURL {
		case ListenerType:
			r = g.listener(snap, p, cv, n)
		case RouteType:
			r = g.route(snap, p, cv, n)
		case ClusterType:
			r = g.cluster(snap, p, cv, n)
		case EndpointType:
			r = g.endpoints(snap, p, cv, n)
		}
		if r != nil {
			out = append(out, *r)
		}
	}
	// Where ServiceEntries of several namespaces name one host, which
	// one the proxy sees is part of every resource's content.
	if choices := snap.HostChoices(p.Namespace); len(choices) > 0 {
		salt := "|hosts|" + strings.Join(choices, ",")
		for i := range out {
			out[i].Key += salt
		}
	}
	return out
}

// allNames lists the client-side names of every port of the services the
// client sees.
func allNames(cv clientView, typeURL string) []string {
	var out []string
	for _, svc := range cv.services() {
		for _, port := range svc.Ports {
			switch typeURL {
			case ListenerType, RouteType:
				out = append(out, hostPort(svc.Hostname, port.Port))
			case ClusterType, EndpointType:
				out = append(out, ClusterName(svc.Hostname, port.Port))
			}
		}
	}
	return out
}

// ClusterName is Istio's outbound cluster name without a subset.
func ClusterName(host string, port uint32) string { return resource.ClusterName(host, "", port) }

func hostPort(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// parseClusterName reads "outbound|<port>|<subset>|<host>".
func parseClusterName(name string) (host, subset string, port uint32, ok bool) {
	return resource.ParseClusterName(name)
}

// lookup resolves "<host>[:<port>]" to a service that the client sees
// (its exportTo, its Sidecar) and its port. Without a port, a service
// with exactly one port (that the client sees) is meant.
func lookup(cv clientView, name string) (*model.Service, model.Port, bool) {
	host, portStr, hasPort := strings.Cut(name, ":")
	svc := cv.service(host)
	if svc == nil {
		return nil, model.Port{}, false
	}
	if !hasPort {
		if len(svc.Ports) != 1 {
			return nil, model.Port{}, false
		}
		return svc, svc.Ports[0], true
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, model.Port{}, false
	}
	for _, sp := range svc.Ports {
		if uint64(sp.Port) == p {
			return svc, sp, true
		}
	}
	return nil, model.Port{}, false
}

// parseInbound reads the ip:port of a server listener name.
func parseInbound(name string) (netip.AddrPort, bool) {
	rest, ok := strings.CutPrefix(name, InboundPrefix)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, false
	}
	return ap, true
}

// labelsKey renders labels canonically for a cache key.
func labelsKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%q=%q,", k, labels[k])
	}
	return b.String()
}
