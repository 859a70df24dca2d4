package xds

import (
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ads is the ADS service: go-control-plane's server for state-of-the-world
// streams, and deltaStream for incremental ones. Incremental streams keep
// their subscriptions here rather than in go-control-plane, as interned
// name sets (nameset.go): Envoy sidecars subscribe to every cluster's
// endpoints by name, and a map of those names per stream was most of what
// a connected sidecar cost.
type ads struct {
	serverv3.Server
	s *Server
}

// StreamAggregatedResources serves a state-of-the-world stream. One that
// ends because istiod is shutting down ends with Unavailable, which tells
// the client to reconnect (elsewhere: the listener is closed and the
// connection got a GOAWAY), rather than with OK.
func (a ads) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	err := a.Server.StreamAggregatedResources(stream)
	if err == nil && a.s.shuttingDown() {
		return errShuttingDown
	}
	return err
}

func (a ads) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return a.s.deltaStream(stream)
}

// sotwWatcher is the cache go-control-plane's server reads; incremental
// streams never reach it.
type sotwWatcher struct{ *Server }

func (sotwWatcher) CreateDeltaWatch(*cache.DeltaRequest, cache.Subscription, chan cache.DeltaResponse) (func(), error) {
	return nil, status.Error(codes.Internal, "incremental xDS is served by package xds")
}

// deltaOutCap bounds the responses queued for one incremental stream: one
// per type with an open request, and few types are served.
const deltaOutCap = 8

// deltaStream serves one incremental ADS stream: requests in order, and
// between them the responses that pushes queue.
func (s *Server) deltaStream(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	// Negative: go-control-plane numbers state-of-the-world streams from 1.
	id := -s.deltaStreams.Add(1)
	p, err := s.openStream(stream.Context(), id, true)
	if err != nil {
		return err
	}
	defer s.closeStream(id)
	reqs := make(chan *discovery.DeltaDiscoveryRequest)
	go func() {
		defer close(reqs)
		for {
			req, err := stream.Recv()
			if err != nil {
				return // the stream ended; its handler returns with it
			}
			select {
			case reqs <- req:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	var nonce int64
	send := func(resp *discovery.DeltaDiscoveryResponse) error {
		nonce++
		resp.Nonce = strconv.FormatInt(nonce, 10)
		p.respondedDelta(resp)
		s.metrics.pushes.WithLabelValues(shortType(resp.GetTypeUrl())).Inc()
		return stream.Send(resp)
	}
	for {
		select {
		case <-s.done:
			return errShuttingDown
		case resp := <-p.deltaOut:
			if err := send(resp); err != nil {
				return err
			}
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			// What was queued before the request goes out first, so that
			// the request's answer follows it.
			for queued := true; queued; {
				select {
				case resp := <-p.deltaOut:
					if err := send(resp); err != nil {
						return err
					}
				default:
					queued = false
				}
			}
			if err := s.deltaRequest(p, id, req); err != nil {
				return err
			}
		}
	}
}

// deltaRequest authenticates the stream's first request, records the ACK
// or NACK a request carries and applies it.
func (s *Server) deltaRequest(p *proxy, id int64, req *discovery.DeltaDiscoveryRequest) error {
	if len(req.GetResourceNamesSubscribe())+len(req.GetResourceNamesUnsubscribe())+len(req.GetInitialResourceVersions()) > DefaultMaxNames {
		return status.Errorf(codes.InvalidArgument, "more than %d resource names", DefaultMaxNames)
	}
	intern(req.GetResourceNamesSubscribe())
	if _, err := (callbacks{s}).request(id, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail()); err != nil {
		return err
	}
	if req.GetTypeUrl() == "" {
		return status.Error(codes.InvalidArgument, "type URL is required for ADS")
	}
	if !s.serves(p, req.GetTypeUrl(), true) {
		return nil // ignored, as state-of-the-world streams do
	}
	return p.deltaRequest(req.GetTypeUrl(), req)
}
