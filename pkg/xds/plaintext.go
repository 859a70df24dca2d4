package xds

import (
	"context"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// RegisterPlaintext adds the ADS service to r for the plaintext port
// (Istio's 15010). Its streams are not authenticated: the node metadata's
// identity is taken as claimed, so they get configuration but never
// secrets (Secret requests are answered with nothing) and they are marked
// as such in the log. r must not be a TLS server meant for authenticated
// proxies; use Register there.
func (s *Server) RegisterPlaintext(r grpc.ServiceRegistrar) {
	discovery.RegisterAggregatedDiscoveryServiceServer(r, plaintextADS{s.ads})
}

// plaintextKey marks the context of a stream accepted on the plaintext port.
type plaintextKey struct{}

func isPlaintext(ctx context.Context) bool {
	v, _ := ctx.Value(plaintextKey{}).(bool)
	return v
}

// plaintextADS marks each stream's context before go-control-plane sees it.
type plaintextADS struct {
	discovery.AggregatedDiscoveryServiceServer
}

func (a plaintextADS) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return a.AggregatedDiscoveryServiceServer.StreamAggregatedResources(plaintextSotw{stream, marked(stream.Context())})
}

func (a plaintextADS) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return a.AggregatedDiscoveryServiceServer.DeltaAggregatedResources(plaintextDelta{stream, marked(stream.Context())})
}

func marked(ctx context.Context) context.Context { return context.WithValue(ctx, plaintextKey{}, true) }

type plaintextSotw struct {
	discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	ctx context.Context
}

func (s plaintextSotw) Context() context.Context { return s.ctx }

type plaintextDelta struct {
	discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	ctx context.Context
}

func (s plaintextDelta) Context() context.Context { return s.ctx }
