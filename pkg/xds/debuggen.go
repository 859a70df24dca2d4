package xds

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// The debug types (package debug) are served to a client whose node
// metadata says GENERATOR=event, and nothing else, on an authenticated
// TLS stream only.

// authenticateDebug admits a debug client: on TLS, authenticated, and
// shown every proxy only when its identity is of istiod's namespace or the
// mesh's root namespace (as Istio's debug authorization), else the proxies
// of its own namespace. What the node claims plays no part.
func (c callbacks) authenticateDebug(p *proxy, node *core.Node) error {
	s := c.s
	if isPlaintext(p.ctx) || !tlsStream(p.ctx) {
		s.log.Warn("debug client rejected: debug information is served on the TLS port only", "node", node.GetId())
		return errUnauthenticated
	}
	caller, err := s.cfg.Authenticator.Authenticate(p.ctx)
	if err != nil {
		return s.refuseUnauthenticated("debug client", node, err)
	}
	// The proxies listed are this cluster's: a debug client of another
	// cluster sees none of them.
	if caller.ClusterID != "" && caller.ClusterID != s.cfg.ClusterID {
		s.log.Warn("debug client rejected", "node", node.GetId(), "authenticated_cluster", caller.ClusterID, "err", identity.ErrRemoteCluster)
		return errRemoteCluster
	}
	dc := &debug.Caller{}
	for _, id := range caller.Identities {
		if ns, ok := identity.WorkloadNamespace(id, s.cfg.TrustDomain); ok {
			dc.Identity, dc.Namespace = id, ns
			break
		}
	}
	if dc.Identity.IsZero() {
		s.log.Warn("debug client rejected: no workload identity", "node", node.GetId(), "authenticated", fmt.Sprint(caller.Identities))
		return errForbidden
	}
	if dc.Namespace == s.cfg.SystemNamespace || dc.Namespace == s.mesh.Load().Config.GetRootNamespace() {
		dc.Namespace = ""
	}
	p.mu.Lock()
	p.node, p.debug = node, dc
	p.mu.Unlock()
	s.mu.Lock()
	s.byNode[node] = p
	s.mu.Unlock()
	s.log.Info("debug client connected", "identity", dc.Identity.String(), "namespace_only", dc.Namespace)
	return nil
}

// serves reports whether typeURL is served to p: the debug types to debug
// clients over state of the world, the generated types to proxies.
func (s *Server) serves(p *proxy, typeURL string, delta bool) bool {
	p.mu.Lock()
	debugClient := p.debug != nil
	p.mu.Unlock()
	if debugClient {
		return !delta && (typeURL == debug.TypeDebugSyncz || typeURL == debug.TypeDebugConfigDump || typeURL == debug.TypeDebug)
	}
	if s.knownType(typeURL) {
		return true
	}
	s.sayUnserved(p, typeURL)
	return false
}

// respondDebug answers a debug client's request with one response,
// generated when it arrives. It is called without p.mu, as it reads other
// proxies.
func (p *proxy) respondDebug(typeURL string, w *watch, dc *debug.Caller) {
	var resources []*anypb.Any
	switch typeURL {
	case debug.TypeDebugSyncz:
		resources = p.srv.clientConfigs(dc.Namespace)
	case debug.TypeDebugConfigDump:
		if names := w.req.GetResourceNames(); len(names) == 1 {
			resources = p.srv.configDump(names[0], dc.Namespace)
		}
	case debug.TypeDebug:
		if names := w.req.GetResourceNames(); len(names) == 1 {
			resources = p.srv.debugPages().Page(names[0], dc)
		}
	}
	resp := &cache.PassthroughResponse{
		Request: w.req,
		DiscoveryResponse: &discovery.DiscoveryResponse{
			VersionInfo:  strconv.FormatInt(p.srv.cfg.Clock().UnixNano(), 36),
			TypeUrl:      typeURL,
			Resources:    resources,
			ControlPlane: &core.ControlPlane{Identifier: p.srv.cfg.ControlPlane.Identifier()},
		},
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watches[typeURL] != w {
		return // replaced or closed meanwhile
	}
	select {
	case w.ch <- resp:
		delete(p.watches, typeURL)
	default:
	}
}

// proxiesIn returns the authenticated proxies (not debug clients) of
// namespace, or all of them for "". A proxy's node, sp and debug are set
// once, before it is added to byNode, so s.mu guards reading them.
func (s *Server) proxiesIn(namespace string) []*proxy {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*proxy
	for _, p := range s.byNode {
		if p.debug == nil && (namespace == "" || p.sp.Namespace == namespace) {
			out = append(out, p)
		}
	}
	return out
}

// clientConfigs is every proxy of namespace ("" for all) with the sync
// status of each type it asked for, as Istio's syncz reports it.
func (s *Server) clientConfigs(namespace string) []*anypb.Any {
	var out []*anypb.Any
	for _, p := range s.proxiesIn(namespace) {
		cc := p.clientConfig()
		if a, err := anypb.New(cc); err == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *anypb.Any) int { return cmp.Compare(string(a.GetValue()), string(b.GetValue())) })
	return out
}

func (p *proxy) clientConfig() *statusv3.ClientConfig {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Only what istioctl shows of a node: never its other metadata.
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, k := range []string{"CLUSTER_ID", "NAMESPACE", "ISTIO_VERSION"} {
		if v, ok := p.node.GetMetadata().GetFields()[k]; ok {
			md.Fields[k] = v
		}
	}
	cc := &statusv3.ClientConfig{Node: &core.Node{Id: identity.ProxyID(p.node), Metadata: md}}
	types := map[string]bool{}
	for _, m := range []map[string]sent{p.sent, p.pending} {
		for t := range m {
			types[t] = true
		}
	}
	for t := range p.subs {
		types[t] = true
	}
	for t := range p.delta {
		types[t] = true
	}
	for _, t := range slices.Sorted(maps.Keys(types)) {
		x := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: t}
		sn, sentOK := p.sent[t]
		switch {
		case !sentOK:
			x.ConfigStatus = statusv3.ConfigStatus_NOT_SENT
		case p.nacked[t] != "":
			x.ConfigStatus = statusv3.ConfigStatus_ERROR
			x.ErrorState = &admin.UpdateFailureState{Details: p.nacked[t], LastUpdateAttempt: timestamp(sn.at)}
		case p.acked[t] == sn.version:
			x.ConfigStatus = statusv3.ConfigStatus_SYNCED
		default:
			x.ConfigStatus = statusv3.ConfigStatus_STALE
		}
		if sentOK {
			x.VersionInfo, x.LastUpdated = sn.version, timestamp(sn.at)
		}
		cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, x)
	}
	return cc
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// configDump is the configuration istiod generates now for the proxy
// named id, if it is of namespace ("" for any): Envoy's admin config dump
// sections for clusters, listeners and routes, as istioctl compares them
// with the proxy's own dump.
func (s *Server) configDump(id, namespace string) []*anypb.Any {
	for _, p := range s.proxiesIn(namespace) {
		if identity.ProxyID(p.node) == id {
			return p.configDump(s.state.Load())
		}
	}
	return nil
}

func (p *proxy) configDump(st *pushState) []*anypb.Any {
	p.mu.Lock()
	defer p.mu.Unlock()
	gen := func(typeURL string) []generated {
		sub, ok := p.subs[typeURL]
		if d := p.delta[typeURL]; d != nil {
			sub, ok = d.names.subscription(d.wildcard), true
		}
		if !ok {
			return nil
		}
		return p.responseLocked(st, typeURL, sub).gen
	}
	version := st.snap.Version
	clusters := &admin.ClustersConfigDump{VersionInfo: version}
	for _, g := range gen(typeCluster) {
		clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters,
			&admin.ClustersConfigDump_DynamicCluster{VersionInfo: g.hash, Cluster: g.any})
	}
	listeners := &admin.ListenersConfigDump{VersionInfo: version}
	for _, g := range gen(typeListener) {
		listeners.DynamicListeners = append(listeners.DynamicListeners, &admin.ListenersConfigDump_DynamicListener{
			Name: g.name, ActiveState: &admin.ListenersConfigDump_DynamicListenerState{VersionInfo: g.hash, Listener: g.any},
		})
	}
	routes := &admin.RoutesConfigDump{}
	for _, g := range gen(typeRoute) {
		routes.DynamicRouteConfigs = append(routes.DynamicRouteConfigs,
			&admin.RoutesConfigDump_DynamicRouteConfig{VersionInfo: g.hash, RouteConfig: g.any})
	}
	var out []*anypb.Any
	for _, m := range []proto.Message{clusters, listeners, routes} {
		if a, err := anypb.New(m); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// debugPages serves the /debug pages of TypeDebug: Config.DebugPages,
// and syncz and config_dump from the streams.
func (s *Server) debugPages() *debug.Pages {
	return &debug.Pages{Extra: s.cfg.DebugPages, Syncz: s.Syncz, ConfigDump: s.configDump, Log: s.log}
}

// checkDebugRequest admits a debug client's request for TypeDebug: the
// ACK of the last response, or one page that the caller may read
// (debug.Pages.CheckRequest).
func (p *proxy) checkDebugRequest(names []string, nonce string) error {
	p.mu.Lock()
	dc := p.debug
	last, sentBefore := p.sent[debug.TypeDebug]
	p.mu.Unlock()
	if dc == nil || sentBefore && nonce == last.nonce {
		return nil
	}
	return p.srv.debugPages().CheckRequest(names, dc)
}
