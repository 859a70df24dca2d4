package bootstrap

import (
	"context"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPanickingHandlersAnswerInternal(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	_, err := recoverUnary(log)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Unary"},
		func(context.Context, any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "internal error" {
		t.Errorf("unary: %v, want an opaque Internal", err)
	}
	err = recoverStream(log)(nil, nil, &grpc.StreamServerInfo{FullMethod: "/x/Stream"},
		func(any, grpc.ServerStream) error { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Errorf("stream: %v, want Internal", err)
	}
}

func TestHandlersThatReturnAreUntouched(t *testing.T) {
	want := status.Error(codes.PermissionDenied, "no")
	_, err := recoverUnary(slog.New(slog.DiscardHandler))(context.Background(), nil, &grpc.UnaryServerInfo{},
		func(context.Context, any) (any, error) { return nil, want })
	if err != want {
		t.Errorf("err = %v, want %v", err, want)
	}
}
