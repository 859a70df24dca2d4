package envoygen

import (
	"slices"

	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
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
	ob, nb := &builder{g: g, snap: old}, &builder{g: g, snap: new}
	return !slices.Equal(ob.serviceIdentities(os), nb.serviceIdentities(ns))
}

// ReadsAuthorization reports whether the resource of typeURL named name
// reads AuthorizationPolicies or RequestAuthentications: the inbound
// listener alone (inboundListener's RBAC and jwt_authn filters).
func ReadsAuthorization(typeURL, name string) bool {
	return typeURL == resource.ListenerType && name == virtualInbound
}
