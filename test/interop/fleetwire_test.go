package interop

import (
	"bytes"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The simulated fleet decodes responses straight from the protobuf wire
// format, keeping only what an Envoy's xDS client acts on (resource names,
// the EDS names of clusters, the route names listeners ask of RDS) and
// what the benchmark measures (endpoint addresses). A thousand proxies
// that unmarshalled every Listener and Cluster into Envoy's Go types would
// cost more CPU than the control plane they measure.

const (
	fleetCDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	fleetEDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	fleetLDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
	fleetRDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	fleetHCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

	edsDiscoveryType = 3 // Cluster.DiscoveryType EDS
)

// fleetCodec marshals requests as protobuf messages and decodes responses
// into a fleetResponse. Its name is "proto", so the content type on the
// wire is gRPC's usual one.
type fleetCodec struct{}

func (fleetCodec) Name() string { return "proto" }

func (fleetCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("fleet codec: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("fleet codec: %w", err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (fleetCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*fleetResponse)
	if !ok {
		return fmt.Errorf("fleet codec: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return r.decode(buf.ReadOnlyData())
}

// fleetResponse is what a proxy keeps of one DeltaDiscoveryResponse. The
// receiver sets names, goals and keepAddrs before decoding.
type fleetResponse struct {
	names     *fleetNames
	goals     *atomic.Pointer[fleetGoal] // the goal in force when the response arrives gives needle
	keepAddrs bool                       // keep each load assignment's addresses, not only their fingerprint

	goal   *fleetGoal // the goal whose needle was looked for
	needle []byte     // looked for in every listener and route configuration

	size      int
	typeURL   string
	nonce     string
	removed   []string
	clusters  []fleetCluster
	loads     []fleetLoad
	listeners []fleetListener
	routes    []string // names of the route configurations received
	needleIn  bool     // a listener or route configuration holds needle
}

type fleetCluster struct {
	name string
	eds  string // the name EDS is asked for; "" when the cluster is not of type EDS
}

type fleetLoad struct {
	name  string
	fp    uint64   // endpointFingerprint of its addresses
	addrs []string // "ip:port", only with keepAddrs
}

type fleetListener struct {
	name   string
	routes []string // route configurations its HTTP connection managers ask of RDS
}

// decode reads a DeltaDiscoveryResponse. Go's protobuf encoder writes
// fields in number order, so the type URL (4) comes after the resources
// (2): the first pass finds it, the second reads the resources.
func (r *fleetResponse) decode(b []byte) error {
	r.size = len(b)
	if r.goals != nil {
		r.goal = r.goals.Load()
		r.needle = r.goal.needle
	}
	err := wireFields(b, func(num protowire.Number, v []byte, _ uint64) error {
		switch num {
		case 4:
			r.typeURL = r.names.get(v)
		case 5:
			r.nonce = string(v)
		case 6:
			r.removed = append(r.removed, r.names.get(v))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delta response: %w", err)
	}
	return wireFields(b, func(num protowire.Number, v []byte, _ uint64) error {
		if num != 2 {
			return nil
		}
		return r.resource(v)
	})
}

// resource reads one Resource: its name (3) and the Any (2) holding it.
func (r *fleetResponse) resource(b []byte) error {
	var name, value []byte
	err := wireFields(b, func(num protowire.Number, v []byte, _ uint64) error {
		switch num {
		case 3:
			name = v
		case 2:
			return wireFields(v, func(num protowire.Number, v []byte, _ uint64) error {
				if num == 2 {
					value = v
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("resource: %w", err)
	}
	switch r.typeURL {
	case fleetCDS:
		c, err := decodeCluster(value, r.names)
		if err != nil {
			return err
		}
		if c.name == "" {
			c.name = r.names.get(name)
		}
		r.clusters = append(r.clusters, c)
	case fleetEDS:
		l, err := decodeLoad(value, r.keepAddrs)
		if err != nil {
			return err
		}
		l.name = r.names.get(name)
		r.loads = append(r.loads, l)
	case fleetLDS:
		l, err := decodeListener(value, r.names)
		if err != nil {
			return err
		}
		l.name = r.names.get(name)
		r.listeners = append(r.listeners, l)
		r.needleIn = r.needleIn || (r.needle != nil && bytes.Contains(value, r.needle))
	case fleetRDS:
		r.routes = append(r.routes, r.names.get(name))
		r.needleIn = r.needleIn || (r.needle != nil && bytes.Contains(value, r.needle))
	}
	return nil
}

// decodeCluster reads a Cluster's name (1), discovery type (2) and the
// service name of its eds_cluster_config (3), which Envoy asks EDS for
// instead of the cluster's name when set.
func decodeCluster(b []byte, names *fleetNames) (fleetCluster, error) {
	var c fleetCluster
	var eds bool
	var service []byte
	err := wireFields(b, func(num protowire.Number, v []byte, x uint64) error {
		switch num {
		case 1:
			c.name = names.get(v)
		case 2:
			eds = x == edsDiscoveryType
		case 3:
			return wireFields(v, func(num protowire.Number, v []byte, _ uint64) error {
				if num == 2 {
					service = v
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("cluster: %w", err)
	}
	if eds {
		c.eds = c.name
		if len(service) > 0 {
			c.eds = names.get(service)
		}
	}
	return c, nil
}

// decodeLoad reads the socket addresses of a ClusterLoadAssignment:
// endpoints (2) → lb_endpoints (2) → endpoint (1) → address (1) →
// socket_address (1) → address (2), port_value (3).
func decodeLoad(b []byte, keep bool) (fleetLoad, error) {
	var l fleetLoad
	var sum uint64
	n := 0
	err := wireFields(b, func(num protowire.Number, v []byte, _ uint64) error {
		if num != 2 {
			return nil
		}
		return wireFields(v, func(num protowire.Number, v []byte, _ uint64) error {
			if num != 2 {
				return nil
			}
			addr, port, err := lbEndpointAddress(v)
			if err != nil || addr == nil {
				return err
			}
			sum += endpointHash(addr, port)
			n++
			if keep {
				l.addrs = append(l.addrs, fmt.Sprintf("%s:%d", addr, port))
			}
			return nil
		})
	})
	if err != nil {
		return l, fmt.Errorf("load assignment: %w", err)
	}
	l.fp = fingerprintOf(sum, n)
	return l, nil
}

// lbEndpointAddress is the socket address of an LbEndpoint, nil if it has
// none (a pipe or an internal address).
func lbEndpointAddress(b []byte) (addr []byte, port uint64, err error) {
	path := []protowire.Number{1, 1, 1} // endpoint, address, socket_address
	cur := b
	for _, want := range path {
		var next []byte
		err = wireFields(cur, func(num protowire.Number, v []byte, _ uint64) error {
			if num == want {
				next = v
			}
			return nil
		})
		if err != nil || next == nil {
			return nil, 0, err
		}
		cur = next
	}
	err = wireFields(cur, func(num protowire.Number, v []byte, x uint64) error {
		switch num {
		case 2:
			addr = v
		case 3:
			port = x
		}
		return nil
	})
	return addr, port, err
}

// decodeListener reads the route configuration names a Listener's HTTP
// connection managers ask of RDS: filter_chains (3) and
// default_filter_chain (25) → filters (3) → typed_config (4) →
// HttpConnectionManager rds (3) → route_config_name (2).
func decodeListener(b []byte, names *fleetNames) (fleetListener, error) {
	var l fleetListener
	chain := func(v []byte) error {
		return wireFields(v, func(num protowire.Number, v []byte, _ uint64) error {
			if num != 3 {
				return nil
			}
			return wireFields(v, func(num protowire.Number, v []byte, _ uint64) error {
				if num != 4 {
					return nil
				}
				route, err := rdsRouteName(v)
				if err == nil && route != nil {
					l.routes = append(l.routes, names.get(route))
				}
				return err
			})
		})
	}
	err := wireFields(b, func(num protowire.Number, v []byte, _ uint64) error {
		if num == 3 || num == 25 {
			return chain(v)
		}
		return nil
	})
	if err != nil {
		return l, fmt.Errorf("listener: %w", err)
	}
	return l, nil
}

// rdsRouteName is the route_config_name of an Any holding an
// HttpConnectionManager that uses RDS, nil for any other filter.
func rdsRouteName(anyMsg []byte) ([]byte, error) {
	var typeURL, value []byte
	err := wireFields(anyMsg, func(num protowire.Number, v []byte, _ uint64) error {
		switch num {
		case 1:
			typeURL = v
		case 2:
			value = v
		}
		return nil
	})
	if err != nil || string(typeURL) != fleetHCM {
		return nil, err
	}
	var route []byte
	err = wireFields(value, func(num protowire.Number, v []byte, _ uint64) error {
		if num != 3 {
			return nil
		}
		return wireFields(v, func(num protowire.Number, v []byte, _ uint64) error {
			if num == 2 {
				route = v
			}
			return nil
		})
	})
	return route, err
}

// wireFields calls fn with each field of the message b: the bytes of a
// length-delimited field or the value of a varint; other wire types are
// skipped. Each field is read once; nothing is copied.
func wireFields(b []byte, fn func(num protowire.Number, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType && typ != protowire.VarintType {
			continue
		}
		if err := fn(num, v, x); err != nil {
			return err
		}
	}
	return nil
}
