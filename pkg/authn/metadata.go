package authn

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"
)

// MaxTokenSize bounds the bearer tokens accepted from callers, in bytes.
// Service-account and OIDC tokens are well under 2 KiB; anything larger is
// refused before it is parsed.
const MaxTokenSize = 8 << 10

// maxClusterIDSize bounds the clusterid metadata value.
const maxClusterIDSize = 253

const (
	authorizationKey = "authorization"
	clusterIDKey     = "clusterid"
	bearerScheme     = "bearer"
)

// BearerToken returns the token of the "authorization: Bearer <token>"
// metadata in ctx. The scheme is matched case-insensitively. It returns
// ErrNoCredentials when there is no authorization metadata or it holds
// another scheme, and ErrTokenTooLarge for a token over MaxTokenSize.
func BearerToken(ctx context.Context) (string, error) {
	// ValueFromIncomingContext copies this key's values only, not the
	// whole metadata map.
	values := metadata.ValueFromIncomingContext(ctx, authorizationKey)
	switch len(values) {
	case 0:
		return "", ErrNoCredentials
	case 1:
	default:
		return "", fmt.Errorf("read bearer token: %d authorization values: %w", len(values), ErrMalformedMetadata)
	}
	scheme, rest, _ := strings.Cut(values[0], " ")
	if !strings.EqualFold(scheme, bearerScheme) {
		return "", ErrNoCredentials
	}
	token := strings.TrimLeft(rest, " ")
	if len(token) > MaxTokenSize {
		return "", fmt.Errorf("read bearer token: %d bytes, limit %d: %w", len(token), MaxTokenSize, ErrTokenTooLarge)
	}
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("read bearer token: %w", ErrMalformedMetadata)
	}
	return token, nil
}

// ClusterID returns the cluster the caller claims in its "clusterid"
// metadata, or "" when there is none.
func ClusterID(ctx context.Context) (string, error) {
	values := metadata.ValueFromIncomingContext(ctx, clusterIDKey)
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", fmt.Errorf("read cluster id: %d values: %w", len(values), ErrMalformedMetadata)
	case len(values[0]) > maxClusterIDSize:
		return "", fmt.Errorf("read cluster id: %d bytes, limit %d: %w", len(values[0]), maxClusterIDSize, ErrMalformedMetadata)
	}
	return values[0], nil
}

// authenticateBearer reads the request's bearer token and claimed cluster
// ID, and has verify turn the token into the Caller.
func authenticateBearer(ctx context.Context, verify func(ctx context.Context, token, cluster string) (*Caller, error)) (*Caller, error) {
	token, err := BearerToken(ctx)
	if err != nil {
		return nil, err
	}
	cluster, err := ClusterID(ctx)
	if err != nil {
		return nil, err
	}
	return verify(ctx, token, cluster)
}
