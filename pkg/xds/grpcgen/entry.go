package grpcgen

import (
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/model"
)

// visible reports whether the resource of typeURL named name is of a
// service p's namespace sees: a ServiceEntry's host is seen where its
// exportTo exports it. (The mesh's defaultServiceExportTo is not read
// here: an entry without exportTo is seen everywhere.)
func visible(snap *model.Snapshot, p *Proxy, typeURL, name string) bool {
	var host string
	switch typeURL {
	case ClusterType, EndpointType:
		h, _, ok := parseClusterName(name)
		if !ok {
			return true
		}
		host = h
	case ListenerType, RouteType:
		if strings.HasPrefix(name, InboundPrefix) {
			return true
		}
		host, _, _ = strings.Cut(name, ":")
	default:
		return true
	}
	svc := snap.Service(host)
	return svc == nil || svc.VisibleTo(p.Namespace, nil)
}
