package bootstrap

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/bulwark-mesh/bulwark/pkg/xds"
)

// connReadBuffer is the read buffer of each gRPC connection (gRPC's
// default is 32 KiB).
const connReadBuffer = 8 << 10

// newGRPCServer builds a gRPC server with the limits an untrusted peer must
// not exceed; with a nil tlsConfig it is plaintext.
func newGRPCServer(cfg Config, tlsConfig *tls.Config, log *slog.Logger) *grpc.Server {
	var creds []grpc.ServerOption
	if tlsConfig != nil {
		creds = append(creds, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	return grpc.NewServer(append(creds,
		grpc.ForceServerCodecV2(xds.Codec()),
		// Per connection, kept small: requests are small, and thousands
		// of proxies stay connected.
		grpc.ReadBufferSize(connReadBuffer),
		grpc.SharedWriteBuffer(true),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.ConnectionTimeout(connectionTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    30 * time.Second,
			Timeout: 10 * time.Second,
		}),
		grpc.ChainUnaryInterceptor(recoverUnary(log)),
		grpc.ChainStreamInterceptor(recoverStream(log)),
	)...)
}

// tlsConfig serves istiod's current certificate and verifies client
// certificates, when given, against the current trust bundle.
func (s *Server) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{
				MinVersion:     tls.VersionTLS12,
				GetCertificate: s.serving.GetCertificate,
				ClientAuth:     tls.VerifyClientCertIfGiven,
				NextProtos:     []string{"h2"},
			}
			if b := s.ca.Current(); b != nil {
				c.ClientCAs = b.Pool()
			}
			return c, nil
		},
	}
}

func limitListener(ln net.Listener, n int) net.Listener { return newShedListener(ln, n) }

// errPanic is the opaque answer to a request whose handler panicked.
var errPanic = status.Error(codes.Internal, "internal error")

func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				resp, err = nil, errPanic
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in gRPC stream", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = errPanic
			}
		}()
		return handler(srv, ss)
	}
}
