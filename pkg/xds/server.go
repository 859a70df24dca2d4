// Package xds serves the Aggregated Discovery Service to proxies: it
// authenticates each proxy, generates its resources from the mesh model,
// and pushes changes after a debounce.
//
// The state-of-the-world protocol is go-control-plane's server, for which
// this package is the ConfigWatcher and callbacks; incremental streams are
// served here (deltastream.go).
// Resources are marshalled once per model snapshot and content key and
// shared by every proxy.
//
// State of the world: a response is sent when what a proxy asked for
// (names, content) differs from what it was last sent, so a NACKed version
// is not sent again until the model or the subscription changes. Empty
// resource names after a first request that named resources unsubscribe;
// an empty first request is a wildcard (Envoy's LDS/CDS). Requests whose
// nonce is not the last one sent are ignored without ending the stream, as
// are unknown type URLs.
//
// Incremental: a response carries the resources whose version differs from
// what the proxy was sent, and the names it holds that are gone.
//
// A proxy whose metadata says GENERATOR=grpc gets the proxyless gRPC
// resources of package grpcgen; an Envoy sidecar (node type "sidecar")
// and an Envoy gateway (node type "router", Istio's ingress gateway)
// those of package envoygen. With Config.Secrets the
// Secret type (SDS: ROOTCA, gateway credentialName secrets) is served on
// the same streams, and only to proxies whose stream is TLS.
//
// This package is the transport and the push state: streams, their
// authentication, what each proxy asked for, holds and acknowledged, and
// the push states whose shared responses answer them. Those live together
// because every answer is computed under the proxy's stream lock from its
// subscription, its holdings and the push state, and a push's history
// says which of them a change reaches. What reads no stream is apart:
// who a node is (package identity), what one mesh configuration generates
// and the scope a workload gets (package generation), what of the
// configuration is not applied as written (package report), and what
// istiod shows operators and istioctl (package debug). The resources
// themselves are packages envoygen's and grpcgen's.
package xds

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/model"
	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/generation"
	"github.com/bulwark-mesh/bulwark/pkg/xds/grpcgen"
	"github.com/bulwark-mesh/bulwark/pkg/xds/report"
	"github.com/bulwark-mesh/bulwark/pkg/xds/reqauthn"
)

const (
	typeListener = grpcgen.ListenerType
	typeRoute    = grpcgen.RouteType
	typeCluster  = grpcgen.ClusterType
	typeEndpoint = grpcgen.EndpointType
)

// Defaults for zero Config fields.
const (
	DefaultDebounceQuiet = 100 * time.Millisecond
	DefaultDebounceMax   = 10 * time.Second
	DefaultStreamRate    = 100 // new streams per second
	DefaultStreamBurst   = 500
	DefaultStreamWait    = time.Second
	DefaultMaxNames      = 10000 // resource names in one request
)

// Model is the mesh model the server reads.
type Model interface {
	Current() *model.Snapshot
	Subscribe() (<-chan *model.Snapshot, func())
}

// Config configures a Server.
type Config struct {
	Model         Model
	Authenticator authn.Authenticator
	TrustDomain   spiffeid.TrustDomain
	// ClusterID is istiod's own cluster: the model's Pods and Secrets are
	// its, and remote clusters' pods are kept apart by cluster. A proxy
	// belongs to the cluster that authenticated it, and its workload is
	// looked up there alone; its node metadata CLUSTER_ID, when set, must
	// name that same cluster (proxycluster.go).
	ClusterID string
	// ClusterAliases are old cluster IDs standing for current ones
	// (Istio's --clusterAliases): node metadata CLUSTER_ID naming an
	// alias names the cluster it stands for. Read only.
	ClusterAliases authn.ClusterAliases
	Registerer     prometheus.Registerer
	Logger         *slog.Logger
	Clock          func() time.Time
	// DebounceQuiet is how long the model must stay unchanged before a
	// push; DebounceMax bounds how long a push waits for quiet. A change
	// of endpoints or authorization alone that comes after at least
	// DebounceQuiet without a push is pushed at once: it has nothing to
	// merge with yet, and costs only what it touches. The changes that
	// follow it within DebounceQuiet wait for quiet and go out merged.
	DebounceQuiet time.Duration
	DebounceMax   time.Duration
	// StreamRate and StreamBurst bound how fast new streams are accepted.
	// A stream whose turn comes within StreamWait waits for it (so at most
	// about StreamRate×StreamWait streams wait at once); others get
	// ResourceExhausted at once.
	StreamRate  rate.Limit
	StreamBurst int
	StreamWait  time.Duration
	// Secrets, when set, serves the Secret type (SDS) on the same
	// streams, to proxies on TLS streams only; without it Secret requests
	// are ignored like any unknown type.
	Secrets SecretSource
	// TrustBundle, when set, is served as Istio's PCDS (TypeProxyConfig)
	// and pushed on every change.
	TrustBundle TrustBundle
	// SystemNamespace is istiod's namespace: debug clients (istioctl)
	// authenticated in it, or in the mesh's root namespace, are shown every
	// proxy; others the proxies of their own namespace.
	SystemNamespace string
	// ControlPlane names this istiod in debug responses.
	ControlPlane debug.ControlPlane
	// DebugPages are istiod's /debug pages, by name ("unsupported"), that
	// debug.TypeDebug serves too, beside syncz and config_dump: to debug clients
	// authenticated in SystemNamespace or the mesh's root namespace only.
	// Each is called with a GET of /debug/<name>?<query> that carries no
	// caller: the handlers must not authorize by it.
	DebugPages map[string]http.Handler
	// Mesh, when set, is the mesh configuration: outboundTrafficPolicy
	// and enableAutoMtls shape Envoy sidecars' resources, rootNamespace
	// names the namespace of mesh-wide policies. A change is pushed like a
	// model change. Without it, Istio's defaults and the model's root
	// namespace apply.
	Mesh MeshSource
	// KeySets, when set, fetches the key sets of the model's
	// RequestAuthentications, which Envoy sidecars get inline in
	// jwt_authn; a change is pushed like a model change. Without it,
	// every issuer whose rule has no inline jwks gets a key set that
	// rejects its tokens.
	KeySets KeySets
	// AllowInsecureSkipVerify lets a DestinationRule's SIMPLE or MUTUAL
	// TLS skip verifying the server; without it such a rule's clusters
	// get no endpoints.
	AllowInsecureSkipVerify bool
	// ScopeGatewayToNamespace applies to a gateway pod (a router) only the
	// Gateways of its own namespace, as Istio's
	// PILOT_SCOPE_GATEWAY_TO_NAMESPACE; otherwise a Gateway of any
	// namespace whose selector matches the pod's labels applies.
	ScopeGatewayToNamespace bool
	// AllowLoopbackHTTPJWKS lets RequestAuthentication key sets be
	// fetched over plain http from loopback hosts; without it such a
	// rule's issuer gets a key set that rejects every token.
	AllowLoopbackHTTPJWKS bool
	// SidecarIngressTLS terminates the tls of Sidecar ingress listeners,
	// as Istio's ENABLE_TLS_ON_SIDECAR_INGRESS.
	SidecarIngressTLS bool
	// MeshNetworks is meshNetworks (istiod's --networksConfig): the
	// networks and their gateways, besides the Services that expose a
	// network; nil: none.
	MeshNetworks *model.MeshNetworks
	// Networks, when set, is meshNetworks as it changes, in place of
	// MeshNetworks. A change is pushed as the load assignments whose
	// network gateways it changes, not as a full push.
	Networks NetworksSource
}

// Server is the ADS server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	gen     *grpcgen.Generator
	metrics *metrics
	// unserved logs and counts requests of types not served.
	unserved *unserved
	limiter  *rate.Limiter
	ads      ads
	stop     context.CancelFunc
	done     <-chan struct{} // closed by stop

	deltaStreams atomic.Int64 // incremental streams opened
	names        nameSets     // the name sets they subscribe to
	helds        heldBases    // what they hold

	state   atomic.Pointer[pushState]
	history history                         // what each recent push changed
	mesh    atomic.Pointer[generation.Mesh] // in force; the next push state is built with it

	reporter *report.Reporter // policy problems, logged once each

	warmingHold time.Duration // see warming.go

	secretQueue secretQueue // proxies whose secrets changed

	bundles      bundleVersions                   // the roots of recent PCDS versions
	rotationRoot atomic.Pointer[x509.Certificate] // the root a rotation waits for, if any

	mu      sync.Mutex
	streams map[int64]*proxy
	byNode  map[*core.Node]*proxy
}

// New returns a server for cfg. It does no I/O and starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Model == nil || cfg.Authenticator == nil || cfg.TrustDomain.IsZero() {
		return nil, errors.New("xds: model, authenticator and trust domain are required")
	}
	cfg.DebounceQuiet = cmp.Or(cfg.DebounceQuiet, DefaultDebounceQuiet)
	cfg.DebounceMax = cmp.Or(cfg.DebounceMax, DefaultDebounceMax)
	cfg.StreamRate = cmp.Or(cfg.StreamRate, DefaultStreamRate)
	cfg.StreamBurst = cmp.Or(cfg.StreamBurst, DefaultStreamBurst)
	cfg.StreamWait = cmp.Or(cfg.StreamWait, DefaultStreamWait)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:         cfg,
		log:         cfg.Logger,
		gen:         &grpcgen.Generator{TrustDomain: cfg.TrustDomain},
		metrics:     newMetrics(cfg.Registerer),
		unserved:    newUnserved(cfg.Clock),
		limiter:     rate.NewLimiter(cfg.StreamRate, cfg.StreamBurst),
		warmingHold: defaultWarmingHold,
		secretQueue: secretQueue{wake: make(chan struct{}, 1)},
		streams:     make(map[int64]*proxy),
		byNode:      make(map[*core.Node]*proxy),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.unserved.counter)
	}
	s.reporter = report.New(report.Config{
		TrustDomain: cfg.TrustDomain, SystemNamespace: cfg.SystemNamespace, JWKSRule: s.jwksRule(),
		FailClosed: s.metrics.failClosed, Logger: cfg.Logger,
	})
	s.mesh.Store(s.newMeshState(currentMesh(cfg.Mesh), currentKeys(cfg.KeySets), s.currentNetworks()))
	s.state.Store(s.newState(cfg.Model.Current(), time.Time{}))
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done = cancel, ctx.Done()
	s.ads = ads{serverv3.NewServer(ctx, sotwWatcher{s}, callbacks{s}, sotw.WithOrderedADS()), s}
	return s, nil
}

// shuttingDown reports whether Run has ended the streams.
func (s *Server) shuttingDown() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Register adds the ADS service to r.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	discovery.RegisterAggregatedDiscoveryServiceServer(r, s.ads)
}

// Run pushes model and mesh configuration changes to proxies until ctx is
// done, then ends every stream.
func (s *Server) Run(ctx context.Context) error {
	defer s.stop()
	if s.cfg.Secrets != nil {
		defer background(ctx, s.watchSecrets)()
	}
	if s.cfg.TrustBundle != nil {
		defer background(ctx, s.watchTrustBundle)()
	}
	updates, cancel := s.cfg.Model.Subscribe()
	defer cancel()
	meshUpdates, cancelMesh := s.subscribeMesh()
	defer cancelMesh()
	keyUpdates, cancelKeys := s.subscribeKeys()
	defer cancelKeys()
	netUpdates, cancelNets := s.subscribeNetworks()
	defer cancelNets()
	var (
		pending     *model.Snapshot // a model change not pushed yet
		meshPending bool            // a mesh change not pushed yet
		first       time.Time       // of the first change not pushed yet
		pushed      = s.cfg.Clock() // when the last push ended: New made the first state
		quiet       = time.NewTimer(time.Hour)
	)
	quiet.Stop()
	defer quiet.Stop()
	push := func() {
		if pending == nil {
			pending = s.cfg.Model.Current()
		}
		s.push(pending, first)
		pending, meshPending = nil, false
		pushed = s.cfg.Clock()
	}
	// arrived notes a change about to be recorded, and whether it comes
	// after a quiet period: nothing pending, no push within DebounceQuiet.
	arrived := func() (idle bool) {
		if pending != nil || meshPending {
			return false
		}
		first = s.cfg.Clock()
		return first.Sub(pushed) >= s.cfg.DebounceQuiet
	}
	// changed debounces a change: the first model is applied at once
	// (there is nothing to coalesce it with, and readiness waits for it),
	// so is a prompt change after a quiet period, and no change waits
	// longer than DebounceMax.
	changed := func(idle bool) {
		if idle || !s.HasSynced() || s.cfg.Clock().Sub(first) >= s.cfg.DebounceMax {
			quiet.Stop()
			push()
			return
		}
		quiet.Reset(s.cfg.DebounceQuiet)
	}
	if snap := s.state.Load().snap; snap.Version != "" {
		s.reportPolicies(snap)
		s.wantKeys(snap)
	}
	// A change made between New and Subscribe is caught here.
	if mc := currentMesh(s.cfg.Mesh); mc != s.mesh.Load().Config {
		s.applyMesh(mc)
		meshPending = true
	}
	if ks := currentKeys(s.cfg.KeySets); ks != s.mesh.Load().Keys {
		s.applyKeys(ks)
		meshPending = true
	}
	if nets := s.currentNetworks(); nets != s.mesh.Load().Settings().MeshNetworks {
		s.applyNetworks(nets)
		meshPending = true
	}
	if cur := s.cfg.Model.Current(); meshPending || s.mesh.Load().Derive(cur).Version != s.state.Load().snap.Version {
		pending, first = cur, s.cfg.Clock()
		push()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap, ok := <-updates:
			if !ok {
				return nil
			}
			idle := arrived() && s.prompt(snap)
			pending = snap
			changed(idle)
		case mc, ok := <-meshUpdates:
			if !ok {
				meshUpdates = nil
				continue
			}
			arrived() // a mesh change is pushed whole: it waits for quiet
			s.applyMesh(mc)
			meshPending = true
			changed(false)
		case ks, ok := <-keyUpdates:
			if !ok {
				keyUpdates = nil
				continue
			}
			arrived()
			s.applyKeys(ks)
			meshPending = true
			changed(false)
		case nets, ok := <-netUpdates:
			if !ok {
				netUpdates = nil
				continue
			}
			arrived() // waits for quiet, as a mesh change does
			s.applyNetworks(nets)
			meshPending = true
			changed(false)
		case <-quiet.C:
			if pending != nil || meshPending {
				push()
			}
		}
	}
}

// HasSynced reports whether a model published by a source (a snapshot
// with a version) is the one served.
func (s *Server) HasSynced() bool { return s.state.Load().snap.Version != "" }

// push makes the model snapshot snap, under the mesh configuration in
// force, current and answers every open watch it changes.
func (s *Server) push(snap *model.Snapshot, changedAt time.Time) {
	st := s.newState(snap, changedAt)
	prev := s.state.Load()
	if st.snap.Version != "" && st.snap.Version == prev.snap.Version && st.mesh == prev.mesh {
		return // nothing new: a model change already pushed with a mesh change
	}
	st.seq = prev.seq + 1
	c := s.classify(prev, st)
	// Policies and rules are read again only when they may have changed:
	// not for services and endpoints, the changes a mesh sees most.
	// A meshNetworks change changes what the network report says.
	policies := c.full || c.authz || len(c.sidecars) > 0 || c.rules != nil || st.mesh != prev.mesh
	if policies {
		s.wantKeys(snap)
	}
	s.history.record(c)
	s.metrics.pushTriggers.WithLabelValues(c.trigger()).Inc()
	s.state.Store(st)
	s.mu.Lock()
	proxies := make([]*proxy, 0, len(s.streams))
	for _, p := range s.streams {
		proxies = append(proxies, p)
	}
	s.mu.Unlock()
	s.log.Debug("pushing model", "version", st.snap.Version, "proxies", len(proxies), "full", c.full, "endpointsOf", len(c.hosts))
	for _, p := range proxies {
		p.pushAll(st)
	}
	if policies { // after the proxies: they need not wait for the logs
		s.reportPolicies(st.snap)
	}
}

// wantKeys has the key sets of snap's RequestAuthentications fetched.
func (s *Server) wantKeys(snap *model.Snapshot) {
	if s.cfg.KeySets != nil {
		s.cfg.KeySets.Want(reqauthn.Sources(snap.Resources().RequestAuthentications, s.jwksRule()))
	}
}

// reportPolicies has the reporter log and count what of the snapshot is
// not applied as written (package report), with the proxies connected now.
func (s *Server) reportPolicies(snap *model.Snapshot) {
	s.reporter.Report(snap, s.mesh.Load(), s.connected())
}

// connected is what the reporter reads of the connected proxies: the
// workloads of routers, and whether a proxyless gRPC client is connected.
// Debug clients are no proxies.
func (s *Server) connected() report.Connected {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c report.Connected
	for _, p := range s.streams {
		p.mu.Lock()
		if p.wl != nil && p.wl.Router && p.debug == nil {
			c.Routers = append(c.Routers, p.wl)
		}
		if p.wl != nil && !p.wl.Envoy {
			c.Proxyless = true
		}
		p.mu.Unlock()
	}
	return c
}

// ProxyStatus is what the server knows of one connected proxy.
type ProxyStatus struct {
	NodeID string
	// Sent and Acked are the versions sent and acknowledged, by type URL.
	Sent, Acked map[string]string
	// Rejected is the last error detail of a NACK, by type URL.
	Rejected map[string]string
}

// proxies returns every stream's proxy.
func (s *Server) proxies() []*proxy {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]*proxy, 0, len(s.streams))
	for _, p := range s.streams {
		ps = append(ps, p)
	}
	return ps
}

// Proxies returns the status of every authenticated proxy.
func (s *Server) Proxies() []ProxyStatus {
	var out []ProxyStatus
	for _, p := range s.proxies() {
		if st, ok := p.status(); ok {
			out = append(out, st)
		}
	}
	return out
}

// background runs fn until ctx is done or the returned stop is called,
// which waits for fn to return.
func background(ctx context.Context, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { fn(ctx); close(done) }()
	return func() { cancel(); <-done }
}
