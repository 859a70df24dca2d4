package envoygen

import (
	"slices"
	"strconv"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// EndpointsReadElsewhere reports whether resources other than load
// assignments read something different of the endpoints of the service
// of hostname in old and new, two snapshots that differ in endpoints
// only. When they do not, an endpoint change is the load assignments'
// alone.
//
// Outside load assignments, endpoints are read by clusters, for the
// identities the service's servers run as (serviceIdentities), and, of a
// headless service, by its passthrough cluster's mTLS and its listeners
// to each endpoint's address (asPassthrough, outboundEntries). A proxy's
// inbound listener reads the endpoints at its own addresses, which are
// part of its Scope, so a proxy whose scope changed regenerates anyway.
func (g *Generator) EndpointsReadElsewhere(old, new *model.Snapshot, hostname string) bool {
	os, ns := old.Service(hostname), new.Service(hostname)
	if os == nil || ns == nil || os.Headless || ns.Headless {
		return true
	}
	// A ServiceEntry's DNS clusters hold their endpoints; a NONE one's
	// TLS reads them, as a headless service's.
	for _, svc := range []*model.Service{os, ns} {
		if svc.Entry != nil && svc.Entry.Resolution != networkingv1.ServiceEntry_STATIC {
			return true
		}
	}
	ob, nb := &builder{g: g, snap: old}, &builder{g: g, snap: new}
	return !slices.Equal(ob.serviceIdentities(os), nb.serviceIdentities(ns))
}

// ReadsAuthorization reports whether the resource of typeURL named name
// reads AuthorizationPolicies or RequestAuthentications: the inbound
// listener alone (inboundListener's RBAC and jwt_authn filters).
func ReadsAuthorization(typeURL, name string) bool {
	return typeURL == resource.ListenerType && name == virtualInbound
}

// AuthorizationReaders are the names of the resources of typeURL that
// ReadsAuthorization: every sidecar has them.
func AuthorizationReaders(typeURL string) []string {
	if typeURL == resource.ListenerType {
		return []string{virtualInbound}
	}
	return nil
}

// ServiceNames calls add with the type and name of every resource that
// may read the service of hostname in snap, whichever proxy it is
// generated for; nothing when snap has no such service. A change of the
// service (added, removed, or its definition or endpoints changed) may
// change these and, through the proxy's scope, its inbound resources,
// nothing else:
//   - its clusters and their load assignments, "outbound|<port>|<subset>|<host>",
//     the subsets of every DestinationRule for it (clients of different
//     namespaces see different rules);
//   - the listeners of its addresses, "<address>_<port>", its virtual IPs
//     or, headless, its endpoints' addresses (outboundEntries), and the
//     listener "0.0.0.0_<port>" of each port (httpPorts);
//   - the route "<port>" of each port (routes) and "<host>:<port>"
//     (sniffedRoute);
//   - the listeners of the services whose VirtualService tls or tcp rules
//     route to it (meshl4.go): a destination's cluster takes the port of
//     a service with one port.
func ServiceNames(snap *model.Snapshot, hostname string, add func(typeURL, name string)) {
	svc := snap.Service(hostname)
	if svc == nil {
		return
	}
	if routes.HasL4(snap) {
		for _, v := range routes.AllL4VirtualServices(snap) {
			if !routes.RoutesTo(snap, v.VS, hostname) {
				continue
			}
			for _, other := range snap.Services() {
				if other != svc && slices.ContainsFunc(v.Hosts, func(h string) bool { return routes.HostsMatch(h, other.Hostname) }) {
					listenerNames(other, add)
				}
			}
		}
	}
	var subsets []string
	for _, dr := range snap.DestinationRulesOf(hostname) {
		for _, ss := range dr.GetSpec().GetSubsets() {
			if ss.GetName() != "" {
				subsets = append(subsets, ss.GetName())
			}
		}
	}
	listenerNames(svc, add)
	// The entries of other namespaces for the hostname are what some
	// namespaces see of it.
	for _, alt := range snap.Alternates(hostname) {
		listenerNames(alt, add)
		for _, sp := range alt.Ports {
			for _, subset := range append([]string{""}, subsets...) {
				name := resource.ClusterName(hostname, subset, sp.Port)
				add(resource.ClusterType, name)
				add(resource.EndpointType, name)
			}
			add(resource.RouteType, strconv.FormatUint(uint64(sp.Port), 10))
			add(resource.RouteType, sniffedRouteName(hostname, sp.Port))
		}
	}
	sniDNAT := hasAutoPassthrough(snap) && sniDNATService(svc)
	for _, sp := range svc.Ports {
		for _, subset := range append([]string{""}, subsets...) {
			name := resource.ClusterName(hostname, subset, sp.Port)
			add(resource.ClusterType, name)
			add(resource.EndpointType, name)
			if sniDNAT { // an east-west gateway's (eastwest.go)
				name = resource.SNIClusterName(hostname, subset, sp.Port)
				add(resource.ClusterType, name)
				add(resource.EndpointType, name)
			}
		}
		add(resource.RouteType, strconv.FormatUint(uint64(sp.Port), 10))
		add(resource.RouteType, sniffedRouteName(hostname, sp.Port))
	}
}

// listenerNames calls add with the names of svc's outbound listeners: of
// its virtual IPs or, headless, its endpoints' addresses, and
// "0.0.0.0_<port>", for each port.
func listenerNames(svc *model.Service, add func(typeURL, name string)) {
	addrs := slices.Clone(svc.Addresses)
	if svc.Headless {
		for _, eps := range svc.Endpoints {
			for _, ep := range eps {
				addrs = append(addrs, ep.Address)
			}
		}
	}
	for _, sp := range svc.Ports {
		for _, a := range addrs {
			add(resource.ListenerType, listenerName(a, sp.Port))
		}
		add(resource.ListenerType, listenerName("0.0.0.0", sp.Port))
	}
}
