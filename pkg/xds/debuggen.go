package xds

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Istio's debug types over ADS, which istioctl asks for (proxy-status,
// version; x internal-debug asks for TypeDebug, debugpages.go): a client
// whose node metadata says GENERATOR=event is served these and nothing
// else, on an authenticated TLS stream only.
const (
	debugGenerator = "event"
	// TypeDebugSyncz is every connected proxy's sync status, one
	// envoy.service.status.v3.ClientConfig per proxy.
	TypeDebugSyncz = "istio.io/debug/syncz"
	// TypeDebugConfigDump is the configuration istiod generates for one
	// proxy, named "<pod>.<namespace>", as Envoy's admin config dump
	// sections (clusters, listeners, routes; never secrets).
	TypeDebugConfigDump = "istio.io/debug/config_dump"
)

// ControlPlane is how istiod names itself to istioctl in the debug types'
// responses: core.ControlPlane's identifier, as Istio writes it.
type ControlPlane struct {
	ID      string // this replica: its pod name
	Version string
}

// buildInfo is Istio's BuildInfo as JSON.
type buildInfo struct {
	Version       string `json:"version"`
	GitRevision   string `json:"revision"`
	GolangVersion string `json:"golang_version"`
	BuildStatus   string `json:"status"`
	GitTag        string `json:"tag"`
}

func (c ControlPlane) buildInfo() buildInfo {
	return buildInfo{Version: c.Version, GitRevision: c.Version, GolangVersion: runtime.Version(), BuildStatus: "Clean", GitTag: c.Version}
}

// identifier is Istio's IstioControlPlaneInstance as JSON.
func (c ControlPlane) identifier() string {
	b, _ := json.Marshal(struct {
		Component string
		ID        string
		Info      buildInfo
	}{"istiod", c.ID, c.buildInfo()})
	return string(b)
}

// VersionJSON is what Istio's istiod serves on GET /version of its
// monitoring port, which `istioctl version` reads: {"clientVersion":
// BuildInfo}.
func (c ControlPlane) VersionJSON() []byte {
	b, _ := json.Marshal(struct {
		ClientVersion buildInfo `json:"clientVersion"`
	}{c.buildInfo()})
	return b
}

// debugCaller is an authenticated client of the debug types.
type debugCaller struct {
	identity spiffeid.ID
	// namespace limits what the caller is shown to that namespace's
	// proxies; "" shows every proxy.
	namespace string
}

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
		s.log.Warn("debug client rejected", "node", node.GetId(), "authenticated_cluster", caller.ClusterID, "err", ErrRemoteCluster)
		return errRemoteCluster
	}
	dc := &debugCaller{}
	for _, id := range caller.Identities {
		if ns, ok := workloadNamespace(id, s.cfg.TrustDomain); ok {
			dc.identity, dc.namespace = id, ns
			break
		}
	}
	if dc.identity.IsZero() {
		s.log.Warn("debug client rejected: no workload identity", "node", node.GetId(), "authenticated", fmt.Sprint(caller.Identities))
		return errForbidden
	}
	if dc.namespace == s.cfg.SystemNamespace || dc.namespace == s.mesh.Load().cfg.GetRootNamespace() {
		dc.namespace = ""
	}
	p.mu.Lock()
	p.node, p.debug = node, dc
	p.mu.Unlock()
	s.mu.Lock()
	s.byNode[node] = p
	s.mu.Unlock()
	s.log.Info("debug client connected", "identity", dc.identity.String(), "namespace_only", dc.namespace)
	return nil
}

// workloadNamespace is the namespace of a workload identity
// spiffe://<td>/ns/<namespace>/sa/<name> of trust domain td.
func workloadNamespace(id spiffeid.ID, td spiffeid.TrustDomain) (string, bool) {
	seg := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
	if id.TrustDomain() != td || len(seg) != 4 || seg[0] != "ns" || seg[2] != "sa" || seg[1] == "" {
		return "", false
	}
	return seg[1], true
}

// serves reports whether typeURL is served to p: the debug types to debug
// clients over state of the world, the generated types to proxies.
func (s *Server) serves(p *proxy, typeURL string, delta bool) bool {
	p.mu.Lock()
	debug := p.debug != nil
	p.mu.Unlock()
	if debug {
		return !delta && (typeURL == TypeDebugSyncz || typeURL == TypeDebugConfigDump || typeURL == TypeDebug)
	}
	return s.knownType(typeURL)
}

// respondDebug answers a debug client's request with one response,
// generated when it arrives. It is called without p.mu, as it reads other
// proxies.
func (p *proxy) respondDebug(typeURL string, w *watch, dc *debugCaller) {
	var resources []*anypb.Any
	switch typeURL {
	case TypeDebugSyncz:
		resources = p.srv.clientConfigs(dc.namespace)
	case TypeDebugConfigDump:
		if names := w.req.GetResourceNames(); len(names) == 1 {
			resources = p.srv.configDump(names[0], dc.namespace)
		}
	case TypeDebug:
		if names := w.req.GetResourceNames(); len(names) == 1 {
			resources = p.srv.debugPage(names[0], dc)
		}
	}
	resp := &cache.PassthroughResponse{
		Request: w.req,
		DiscoveryResponse: &discovery.DiscoveryResponse{
			VersionInfo:  strconv.FormatInt(p.srv.cfg.Clock().UnixNano(), 36),
			TypeUrl:      typeURL,
			Resources:    resources,
			ControlPlane: &core.ControlPlane{Identifier: p.srv.cfg.ControlPlane.identifier()},
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

// proxyID is Istio's proxy ID of a node: "<pod>.<namespace>" of a node ID
// "<type>~<ip>~<pod>.<namespace>~<domain>", else the whole node ID.
func proxyID(node *core.Node) string {
	if _, _, id, err := parseNodeID(node.GetId()); err == nil {
		return id
	}
	return node.GetId()
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
	cc := &statusv3.ClientConfig{Node: &core.Node{Id: proxyID(p.node), Metadata: md}}
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
		if proxyID(p.node) == id {
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
