package envoygen

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/bulwark-mesh/bulwark/pkg/xds/routes"
)

// defaultVirtualHostSize is about what a virtual host with the default
// route takes besides its name and domains (its match, decorator, action
// with the default retries, cluster): room reserved for it, not a bound.
const defaultVirtualHostSize = 320

// virtualHostsSize is about the bytes appendVirtualHosts writes for vhs:
// exact for the virtual hosts of VirtualServices, an estimate for those
// with the default route. The buffer grown to it once is not grown again
// and again while each virtual host is appended.
func virtualHostsSize(vhs []portVHost, anyHost bool) int {
	n := 0
	for _, vh := range vhs {
		domains := vh.domains
		if anyHost {
			domains = []string{"*"}
		}
		if vh.routes == nil {
			n += defaultVirtualHostSize + 2*len(vh.name)
			for _, d := range domains {
				n += len(d) + 2
			}
			continue
		}
		wvh := routes.WireVirtualHost{Name: vh.name, Domains: domains, Routes: vh.routes, IncludeRequestAttemptCount: true}
		size := wvh.Size()
		n += protowire.SizeTag(rcVirtualHosts) + protowire.SizeBytes(size)
	}
	return n
}

// catchAllReserve is room for what follows the virtual hosts in a route
// configuration (the catch-all virtual host and the configuration's
// other fields).
const catchAllReserve = 512
