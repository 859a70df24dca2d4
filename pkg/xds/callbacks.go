package xds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unique"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/sds"
	"github.com/bulwark-mesh/bulwark/pkg/xds/debug"
	"github.com/bulwark-mesh/bulwark/pkg/xds/identity"
)

// Errors returned to proxies: opaque, with details in the log.
var (
	errRateLimited      = status.Error(codes.ResourceExhausted, "too many new streams")
	errUnauthenticated  = status.Error(codes.Unauthenticated, "authentication failed")
	errAuthnBackendDown = status.Error(codes.Unavailable, "authentication backend unavailable, retry later")
	errShuttingDown     = status.Error(codes.Unavailable, "istiod is shutting down, reconnect")
	errForbidden        = status.Error(codes.PermissionDenied, "node identity does not match the caller")
	errPodMismatch      = status.Error(codes.PermissionDenied, "node names a pod of another identity")
)

// callbacks implements go-control-plane's server callbacks, for its state
// of the world streams; incremental streams are served by deltaStream.
type callbacks struct{ s *Server }

func (c callbacks) OnStreamOpen(ctx context.Context, id int64, _ string) error {
	_, err := c.s.openStream(ctx, id, false)
	return err
}

func (c callbacks) OnStreamClosed(id int64, _ *core.Node) { c.s.closeStream(id) }

// openStream admits a new stream and registers its proxy; delta: the
// stream is incremental.
func (s *Server) openStream(ctx context.Context, id int64, delta bool) (*proxy, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	p := newProxy(s, id, delta)
	p.ctx = ctx
	s.mu.Lock()
	s.streams[id] = p
	s.mu.Unlock()
	return p, nil
}

func (s *Server) closeStream(id int64) {
	s.mu.Lock()
	p := s.streams[id]
	delete(s.streams, id)
	if p != nil {
		p.mu.Lock()
		if p.warm.timer != nil {
			p.warm.timer.Stop()
		}
		if p.node != nil {
			delete(s.byNode, p.node)
			if p.debug == nil {
				s.metrics.proxies.Dec()
			}
		}
		p.mu.Unlock()
	}
	s.mu.Unlock()
	if p != nil {
		p.closeSecrets()
	}
}

func (c callbacks) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	if len(req.GetResourceNames()) > DefaultMaxNames {
		return status.Errorf(codes.InvalidArgument, "more than %d resource names", DefaultMaxNames)
	}
	intern(req.GetResourceNames())
	node, err := c.request(id, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
	req.Node = node // the authenticated node, whatever later requests claim
	return err
}

// intern replaces names with one shared copy of each: the stream keeps the
// names it subscribes to for as long as it lasts, and every sidecar of a
// mesh names the same clusters and routes.
func intern(names []string) {
	for i, n := range names {
		names[i] = unique.Make(n).Value()
	}
}

// request authenticates the stream's first node and records the ACK or
// NACK a request carries. It returns the authenticated node.
func (c callbacks) request(id int64, node *core.Node, typeURL, nonce string, detail *rpcstatus.Status) (*core.Node, error) {
	s := c.s
	s.mu.Lock()
	p := s.streams[id]
	s.mu.Unlock()
	if p == nil {
		return nil, status.Error(codes.Internal, "unknown stream")
	}
	p.mu.Lock()
	authenticated := p.node
	p.mu.Unlock()
	if authenticated == nil {
		if err := c.authenticate(p, node); err != nil {
			return nil, err
		}
		p.mu.Lock()
		authenticated = p.node
		p.mu.Unlock()
	}
	nack, acked, conv := p.received(typeURL, nonce, detail)
	switch {
	case nack == nackRepeated:
		s.metrics.rejects.WithLabelValues(shortType(typeURL)).Inc()
	case nack != "":
		s.metrics.rejects.WithLabelValues(shortType(typeURL)).Inc()
		s.log.Warn("proxy rejected configuration", "node", authenticated.GetId(), "type", typeURL, "err", nack)
	case acked && conv > 0:
		s.metrics.convergence.Observe(conv.Seconds())
	}
	return authenticated, nil
}

// authenticate checks the first node against the caller's identity.
func (c callbacks) authenticate(p *proxy, node *core.Node) error {
	s := c.s
	meta, err := identity.ParseNode(node)
	if err != nil {
		s.log.Warn("proxy rejected", "node", node.GetId(), "err", err)
		return status.Error(codes.InvalidArgument, "invalid node metadata")
	}
	if meta.Generator == debug.Generator {
		return c.authenticateDebug(p, node)
	}
	wl, err := identity.WorkloadOf(node, meta)
	if err != nil {
		s.log.Warn("proxy rejected", "node", node.GetId(), "err", err)
		return status.Error(codes.InvalidArgument, "invalid node")
	}
	want, err := meta.Identity(s.cfg.TrustDomain)
	plaintext := isPlaintext(p.ctx)
	authenticator := "none (plaintext port)"
	switch {
	case plaintext && err != nil:
		s.log.Warn("proxy rejected", "node", node.GetId(), "err", err)
		return status.Error(codes.InvalidArgument, "invalid node identity")
	case plaintext:
		if cerr := s.bindCluster(wl, node, meta, nil); cerr != nil {
			return cerr
		}
	case !plaintext:
		caller, aerr := s.cfg.Authenticator.Authenticate(p.ctx)
		if aerr != nil {
			return s.refuseUnauthenticated("proxy", node, aerr)
		}
		if cerr := s.bindCluster(wl, node, meta, caller); cerr != nil {
			return cerr
		}
		if err != nil || !slices.Contains(caller.Identities, want) {
			s.log.Warn("proxy rejected", "node", node.GetId(), "claimed", want.String(),
				"authenticated", fmt.Sprint(caller.Identities), "err", identity.ErrIdentityMismatch)
			return errForbidden
		}
		authenticator = caller.Authenticator
	}
	if err := wl.Check(s.state.Load().snap); err != nil {
		s.log.Warn("proxy rejected", "node", node.GetId(), "identity", want.String(), "err", err)
		return errPodMismatch
	}
	p.mu.Lock()
	p.node = node
	p.wl = wl
	p.sp = sds.Proxy{Namespace: meta.Namespace, ServiceAccount: meta.ServiceAccount, Secure: !plaintext && tlsStream(p.ctx), Cluster: wl.Cluster}
	p.mu.Unlock()
	s.mu.Lock()
	s.byNode[node] = p
	s.mu.Unlock()
	s.metrics.proxies.Inc()
	s.log.Info("proxy connected", "node", node.GetId(), "identity", want.String(), "authenticator", authenticator)
	if wl.Router {
		s.reportPolicies(s.state.Load().snap) // its Gateways' problems
	}
	return nil
}

// refuseUnauthenticated answers a stream whose caller could not be
// authenticated: Unavailable, which clients retry, when the credential's
// backend (the API server's TokenReview) could not be reached, logged at
// debug level since an outage would log a line per stream and the API
// server monitor says it once; Unauthenticated otherwise.
func (s *Server) refuseUnauthenticated(who string, node *core.Node, err error) error {
	if errors.Is(err, authn.ErrUnavailable) {
		s.log.Debug(who+" authentication unavailable", "node", node.GetId(), "err", err)
		return errAuthnBackendDown
	}
	s.log.Warn(who+" authentication failed", "node", node.GetId(), "err", err)
	return errUnauthenticated
}

func (c callbacks) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	s := c.s
	s.mu.Lock()
	p := s.streams[id]
	s.mu.Unlock()
	if p != nil && p.responded(resp) {
		s.metrics.pushes.WithLabelValues(shortType(resp.GetTypeUrl())).Inc()
	}
}

// The incremental callbacks are never called: deltaStream serves those
// streams.

func (callbacks) OnDeltaStreamOpen(context.Context, int64, string) error { return nil }
func (callbacks) OnDeltaStreamClosed(int64, *core.Node)                  {}
func (callbacks) OnStreamDeltaRequest(int64, *discovery.DeltaDiscoveryRequest) error {
	return nil
}
func (callbacks) OnStreamDeltaResponse(int64, *discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse) {
}

func (c callbacks) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error {
	return status.Error(codes.Unimplemented, "REST xDS is not supported")
}
func (c callbacks) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}

// knownTypes are the types generated; others are ignored.
var knownTypes = map[string]bool{typeListener: true, typeRoute: true, typeCluster: true, typeEndpoint: true}

// CreateWatch implements cache.ConfigWatcher.
func (s *Server) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	p, serve, err := s.watcher(req.GetNode(), req.GetTypeUrl())
	if !serve {
		return func() {}, err
	}
	if req.GetTypeUrl() == debug.TypeDebug {
		if err := p.checkDebugRequest(req.GetResourceNames(), req.GetResponseNonce()); err != nil {
			return nil, err
		}
	}
	return p.open(req.GetTypeUrl(), &watch{req: req, sub: sub, ch: ch}), nil
}

// watcher is the authenticated proxy of node, and whether typeURL is
// served to it: unknown types are ignored without ending the stream.
func (s *Server) watcher(node *core.Node, typeURL string) (p *proxy, serve bool, err error) {
	s.mu.Lock()
	p = s.byNode[node]
	s.mu.Unlock()
	if p == nil {
		return nil, false, errUnauthenticated
	}
	return p, s.serves(p, typeURL, false), nil
}

// Fetch implements cache.ConfigFetcher.
func (s *Server) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, status.Error(codes.Unimplemented, "REST xDS is not supported")
}

// admit takes a turn from the new-stream limiter, waiting for it when it
// comes within StreamWait, and refuses the stream otherwise.
func (s *Server) admit(ctx context.Context) error {
	r := s.limiter.Reserve()
	if !r.OK() {
		return errRateLimited
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	if d > s.cfg.StreamWait {
		r.Cancel()
		return errRateLimited
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}
