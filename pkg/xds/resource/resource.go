// Package resource holds what every generator of xDS resources shares: the
// type URLs served and the unit of generation, a Resource built lazily and
// at most once per model snapshot and content key.
package resource

import (
	"strconv"

	"google.golang.org/protobuf/proto"
)

// Type URLs of the resources generated.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// Resource is one generated resource. Key identifies its content within a
// model snapshot: two resources of one snapshot with equal keys are equal,
// so Build runs once per key and snapshot however many proxies ask.
type Resource struct {
	Name  string
	Key   string
	Build func() (proto.Message, error)
}

// ClusterName is Istio's outbound cluster name,
// "outbound|<port>|<subset>|<host>".
func ClusterName(host, subset string, port uint32) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + host
}
