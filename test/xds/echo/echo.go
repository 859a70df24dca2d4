// Package echo is a one-method gRPC service for the proxyless end-to-end
// tests: Who answers the server's name and the caller's SPIFFE ID.
package echo

import (
	"context"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Method is the full name of the Who method.
const Method = "/bulwark.test.Echo/Who"

// NoIdentity is the peer reported for a caller without a certificate.
const NoIdentity = "none"

// Register adds the service, answering "<name> <caller SPIFFE ID>".
func Register(s grpc.ServiceRegistrar, name string) { RegisterFailing(s, name, 0) }

// RegisterFailing is Register whose every failEvery-th call (none when
// 0) fails with UNAVAILABLE, as a server going away would.
func RegisterFailing(s grpc.ServiceRegistrar, name string, failEvery int) {
	var calls atomic.Int64
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "bulwark.test.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Who",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in wrapperspb.StringValue
				if err := dec(&in); err != nil {
					return nil, err
				}
				if n := calls.Add(1); failEvery > 0 && n%int64(failEvery) == 0 {
					return nil, status.Error(codes.Unavailable, "failing on purpose")
				}
				return wrapperspb.String(name + " " + callerID(ctx)), nil
			},
		}},
	}, struct{}{})
}

func callerID(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return NoIdentity
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 || len(info.State.PeerCertificates[0].URIs) == 0 {
		return NoIdentity
	}
	return info.State.PeerCertificates[0].URIs[0].String()
}

// Call invokes Who on conn and returns the server's name and the identity it
// saw.
func Call(ctx context.Context, conn grpc.ClientConnInterface) (server, caller string, err error) {
	var out wrapperspb.StringValue
	if err := conn.Invoke(ctx, Method, wrapperspb.String(""), &out); err != nil {
		return "", "", err
	}
	server, caller, _ = strings.Cut(out.GetValue(), " ")
	return server, caller, nil
}
