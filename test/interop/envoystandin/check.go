package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// deps is what an accepted cluster or listener waits for before it is
// warm, as Envoy's init manager does.
type deps struct {
	eds     string      // a cluster's EDS service name; "" when not EDS
	routes  []string    // RDS names of a listener's HTTP connection managers
	secrets []secretRef // SDS secrets of its TLS contexts
}

// secretRef is one SDS secret a resource names, and where it comes from.
type secretRef struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"` // the static cluster of its envoy_grpc source
	ADS     bool   `json:"ads"`     // asked of ADS (credentialName secrets istiod serves)
}

// checker holds what references are checked against.
type checker struct {
	boot     *bootInfo
	clusters func(name string) bool // a cluster exists, static or dynamic
	warnings []string
}

func (c *checker) warnf(format string, args ...any) {
	c.warnings = append(c.warnings, fmt.Sprintf(format, args...))
}

// common runs the checks every resource shares: validation, the name the
// response gives it, unknown TypedStruct types, and the SDS sources of
// its secrets.
func (c *checker) common(kind, name, own string, m proto.Message) ([]secretRef, error) {
	if err := validateTree(m); err != nil {
		return nil, fmt.Errorf("%s '%s': %w", kind, name, err)
	}
	if own != name {
		return nil, fmt.Errorf("%s '%s': the response names it '%s'", kind, own, name)
	}
	var refs []secretRef
	var errs []error
	visitDeep(m, func(sub proto.Message) {
		if u := typedStructURL(sub); u != "" {
			if _, err := protoregistry.GlobalTypes.FindMessageByURL(u); err != nil {
				c.warnf("%s '%s': TypedStruct of unknown type %s", kind, name, u)
			}
		}
		sc, ok := sub.(*tlsv3.SdsSecretConfig)
		if !ok {
			return
		}
		ref, err := c.secretSource(sc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s '%s': %w", kind, name, err))
			return
		}
		if (ref.Cluster != "" || ref.ADS) && !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	})
	return refs, errors.Join(errs...)
}

// secretSource checks where a secret comes from: a static secret of the
// bootstrap, or SDS over a static gRPC cluster (Envoy requires the
// cluster of an envoy_grpc SDS source to be static).
func (c *checker) secretSource(sc *tlsv3.SdsSecretConfig) (secretRef, error) {
	src := sc.GetSdsConfig()
	if src == nil {
		if !c.boot.staticSecrets[sc.GetName()] {
			return secretRef{}, fmt.Errorf("unknown static secret: %s", sc.GetName())
		}
		return secretRef{Name: sc.GetName()}, nil
	}
	if src.GetAds() != nil {
		return secretRef{Name: sc.GetName(), ADS: true}, nil
	}
	api := src.GetApiConfigSource()
	if api == nil || len(api.GetGrpcServices()) != 1 || api.GetGrpcServices()[0].GetEnvoyGrpc() == nil {
		return secretRef{}, fmt.Errorf("secret '%s': SDS config source is not one envoy_grpc service: %v", sc.GetName(), src)
	}
	if api.GetApiType() != corev3.ApiConfigSource_GRPC {
		c.warnf("secret '%s': SDS api_type %s (the agent serves GRPC only)", sc.GetName(), api.GetApiType())
	}
	cluster := api.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	if !c.boot.staticClusters[cluster] {
		return secretRef{}, fmt.Errorf("secret '%s': unknown gRPC client cluster '%s' (an SDS cluster must be static)", sc.GetName(), cluster)
	}
	if c.boot.pipes[cluster] == "" {
		return secretRef{}, fmt.Errorf("secret '%s': SDS cluster '%s' is not on a pipe; the stand-in cannot reach it", sc.GetName(), cluster)
	}
	return secretRef{Name: sc.GetName(), Cluster: cluster}, nil
}

func (c *checker) cluster(name string, cl *clusterv3.Cluster) (deps, error) {
	secrets, err := c.common("cluster", name, cl.GetName(), cl)
	if err != nil {
		return deps{}, err
	}
	if c.boot.staticClusters[name] {
		return deps{}, fmt.Errorf("cluster '%s': a static cluster of that name exists", name)
	}
	d := deps{secrets: secrets}
	if cl.GetType() == clusterv3.Cluster_EDS && cl.GetClusterType() == nil {
		eds := cl.GetEdsClusterConfig()
		if eds.GetEdsConfig().GetAds() == nil {
			return deps{}, fmt.Errorf("cluster '%s': EDS config source is not ADS: %v", name, eds.GetEdsConfig())
		}
		if d.eds = eds.GetServiceName(); d.eds == "" {
			d.eds = name
		}
	}
	if cl.GetTransportSocket() != nil && len(cl.GetTransportSocketMatches()) > 0 {
		c.warnf("cluster '%s': both transport_socket and transport_socket_matches", name)
	}
	if ms := cl.GetTransportSocketMatches(); len(ms) > 0 {
		for i, m := range ms[:len(ms)-1] {
			if len(m.GetMatch().GetFields()) == 0 {
				c.warnf("cluster '%s': transport socket match %d of %d matches everything", name, i+1, len(ms))
			}
		}
	}
	return d, nil
}

func (c *checker) endpoints(name string, cla *endpointv3.ClusterLoadAssignment) error {
	_, err := c.common("cluster load assignment", name, cla.GetClusterName(), cla)
	return err
}

func (c *checker) listener(name string, l *listenerv3.Listener) (deps, error) {
	secrets, err := c.common("listener", name, l.GetName(), l)
	if err != nil {
		return deps{}, err
	}
	if _, ok := c.boot.staticListeners[name]; ok {
		return deps{}, fmt.Errorf("listener '%s': a static listener of that name exists", name)
	}
	d := deps{secrets: secrets}
	if l.GetFilterChainMatcher() == nil {
		if err := duplicateChains(l); err != nil {
			return deps{}, fmt.Errorf("listener '%s': %w", name, err)
		}
	}
	var errs []error
	visitDeep(l, func(m proto.Message) {
		hcm, ok := m.(*hcmv3.HttpConnectionManager)
		if !ok {
			return
		}
		switch {
		case hcm.GetRds() != nil:
			if hcm.GetRds().GetConfigSource().GetAds() == nil {
				c.warnf("listener '%s': RDS '%s' not over ADS", name, hcm.GetRds().GetRouteConfigName())
			}
			if !slices.Contains(d.routes, hcm.GetRds().GetRouteConfigName()) {
				d.routes = append(d.routes, hcm.GetRds().GetRouteConfigName())
			}
		case hcm.GetRouteConfig() != nil:
			rc := hcm.GetRouteConfig()
			if rc.GetValidateClusters() != nil && !rc.GetValidateClusters().GetValue() {
				return
			}
			for _, cl := range routeClusters(rc) {
				if !c.clusters(cl) {
					errs = append(errs, fmt.Errorf("listener '%s': route: unknown cluster '%s'", name, cl))
				}
			}
		default:
			c.warnf("listener '%s': an HTTP connection manager with neither RDS nor an inline route", name)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return deps{}, err
	}
	c.inspectorsNeeded(name, l)
	return d, nil
}

func (c *checker) route(name string, rc *routev3.RouteConfiguration) error {
	if _, err := c.common("route configuration", name, rc.GetName(), rc); err != nil {
		return err
	}
	for _, cl := range routeClusters(rc) {
		if !c.clusters(cl) {
			// RDS does not validate clusters: the route answers 503.
			c.warnf("route configuration '%s': unknown cluster '%s'", name, cl)
		}
	}
	return nil
}

// routeClusters are the clusters a route configuration routes or mirrors to.
func routeClusters(rc *routev3.RouteConfiguration) []string {
	seen := map[string]bool{}
	visitDeep(rc, func(m proto.Message) {
		ra, ok := m.(*routev3.RouteAction)
		if !ok {
			return
		}
		if ra.GetCluster() != "" {
			seen[ra.GetCluster()] = true
		}
		for _, w := range ra.GetWeightedClusters().GetClusters() {
			seen[w.GetName()] = true
		}
		for _, p := range ra.GetRequestMirrorPolicies() {
			if p.GetCluster() != "" {
				seen[p.GetCluster()] = true
			}
		}
	})
	return slices.Sorted(maps.Keys(seen))
}

// duplicateChains refuses a listener two of whose filter chains match
// the same connection, as Envoy's filter chain manager does: every
// combination of the match's lists is one leaf of its tree.
func duplicateChains(l *listenerv3.Listener) error {
	owner := map[string]string{}
	for i, fc := range l.GetFilterChains() {
		name := fc.GetName()
		if name == "" {
			name = "#" + strconv.Itoa(i)
		}
		keys, err := matchKeys(fc.GetFilterChainMatch())
		if err != nil {
			return fmt.Errorf("filter chain '%s': %w", name, err)
		}
		for _, k := range keys {
			if other, ok := owner[k]; ok {
				return fmt.Errorf("multiple filter chains with the same matching rules are defined: '%s' and '%s' (%s)", other, name, k)
			}
			owner[k] = name
		}
	}
	return nil
}

const maxMatchKeys = 1 << 16

func matchKeys(m *listenerv3.FilterChainMatch) ([]string, error) {
	orAny := func(vs []string) []string {
		if len(vs) == 0 {
			return []string{"*"}
		}
		return vs
	}
	cidrs := func(rs []*corev3.CidrRange) []string {
		out := make([]string, 0, len(rs))
		for _, r := range rs {
			out = append(out, r.GetAddressPrefix()+"/"+strconv.FormatUint(uint64(r.GetPrefixLen().GetValue()), 10))
		}
		return orAny(out)
	}
	port := "*"
	if m.GetDestinationPort() != nil {
		port = strconv.FormatUint(uint64(m.GetDestinationPort().GetValue()), 10)
	}
	var srcPorts []string
	for _, p := range m.GetSourcePorts() {
		srcPorts = append(srcPorts, strconv.FormatUint(uint64(p), 10))
	}
	dims := [][]string{
		{"port=" + port}, cidrs(m.GetPrefixRanges()), cidrs(m.GetDirectSourcePrefixRanges()),
		orAny(m.GetServerNames()), {"transport=" + m.GetTransportProtocol()}, orAny(m.GetApplicationProtocols()),
		{m.GetSourceType().String()}, cidrs(m.GetSourcePrefixRanges()), orAny(srcPorts),
	}
	keys := []string{""}
	for _, dim := range dims {
		if len(keys)*len(dim) > maxMatchKeys {
			return nil, fmt.Errorf("filter chain match expands to more than %d combinations", maxMatchKeys)
		}
		next := make([]string, 0, len(keys)*len(dim))
		for _, k := range keys {
			for _, v := range dim {
				next = append(next, k+"|"+v)
			}
		}
		keys = next
	}
	return keys, nil
}

// inspectorsNeeded warns when filter chains match what only a listener
// filter can find out: SNI, TLS and ALPN need tls_inspector, except that
// http_inspector alone sets the plaintext HTTP ALPNs (http/1.1, h2c).
func (c *checker) inspectorsNeeded(name string, l *listenerv3.Listener) {
	has := map[string]bool{}
	for _, f := range l.GetListenerFilters() {
		has[f.GetName()] = true
		if u := f.GetTypedConfig().GetTypeUrl(); u != "" {
			has[u[strings.LastIndex(u, "/")+1:]] = true
		}
	}
	tlsInspector := has["envoy.filters.listener.tls_inspector"] ||
		has["envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"]
	httpInspector := has["envoy.filters.listener.http_inspector"] ||
		has["envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"]
	plainHTTP := func(p string) bool { return p == "http/1.1" || p == "http/1.0" || p == "h2c" }
	for _, fc := range l.GetFilterChains() {
		m := fc.GetFilterChainMatch()
		alpn := m.GetApplicationProtocols()
		switch {
		case tlsInspector:
		case len(m.GetServerNames()) > 0 || m.GetTransportProtocol() == "tls":
			c.warnf("listener '%s': filter chain '%s' matches SNI or TLS without tls_inspector", name, fc.GetName())
		case len(alpn) > 0 && !(httpInspector && m.GetTransportProtocol() != "tls" && !slices.ContainsFunc(alpn, func(p string) bool { return !plainHTTP(p) })):
			c.warnf("listener '%s': filter chain '%s' matches ALPN %v that no listener filter sets", name, fc.GetName(), alpn)
		}
		if !httpInspector && m.GetTransportProtocol() != "tls" && slices.ContainsFunc(alpn, plainHTTP) {
			c.warnf("listener '%s': filter chain '%s' matches plaintext HTTP ALPN without http_inspector", name, fc.GetName())
		}
	}
}
