package authn

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

func TestBearerToken(t *testing.T) {
	tests := map[string]struct {
		ctx       context.Context
		wantToken string
		wantErr   error
	}{
		"a bearer token is returned": {
			ctx:       mdContext("authorization", "Bearer abc.def.ghi"),
			wantToken: "abc.def.ghi",
		},
		"the scheme is matched whatever its case": {
			ctx:       mdContext("authorization", "bEaReR abc.def.ghi"),
			wantToken: "abc.def.ghi",
		},
		"extra spaces after the scheme are skipped": {
			ctx:       mdContext("authorization", "Bearer   abc"),
			wantToken: "abc",
		},
		"a token of exactly the limit is returned": {
			ctx:       mdContext("authorization", "Bearer "+strings.Repeat("a", MaxTokenSize)),
			wantToken: strings.Repeat("a", MaxTokenSize),
		},
		"no metadata means no credentials": {
			ctx:     context.Background(),
			wantErr: ErrNoCredentials,
		},
		"metadata without authorization means no credentials": {
			ctx:     mdContext("clusterid", "east"),
			wantErr: ErrNoCredentials,
		},
		"another scheme means no credentials": {
			ctx:     mdContext("authorization", "Basic dXNlcjpwYXNz"),
			wantErr: ErrNoCredentials,
		},
		"a scheme with no token is malformed": {
			ctx:     mdContext("authorization", "Bearer"),
			wantErr: ErrMalformedMetadata,
		},
		"an empty token is malformed": {
			ctx:     mdContext("authorization", "Bearer "),
			wantErr: ErrMalformedMetadata,
		},
		"a token containing a space is malformed": {
			ctx:     mdContext("authorization", "Bearer abc def"),
			wantErr: ErrMalformedMetadata,
		},
		"two authorization values are malformed": {
			ctx:     mdContext("authorization", "Bearer a", "authorization", "Bearer b"),
			wantErr: ErrMalformedMetadata,
		},
		"a token one byte over the limit is refused": {
			ctx:     mdContext("authorization", "Bearer "+strings.Repeat("a", MaxTokenSize+1)),
			wantErr: ErrTokenTooLarge,
		},
		"a token of 100,000 dots is refused": {
			ctx:     mdContext("authorization", "Bearer "+strings.Repeat(".", 100_000)),
			wantErr: ErrTokenTooLarge,
		},
		"a prefix of the scheme is not the scheme": {
			ctx:     mdContext("authorization", "Bear abc"),
			wantErr: ErrNoCredentials,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := BearerToken(tc.ctx)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("BearerToken() error = %v, want %v", err, tc.wantErr)
			}
			if got != tc.wantToken {
				t.Errorf("BearerToken() = %q, want %q", got, tc.wantToken)
			}
		})
	}
}

func TestClusterID(t *testing.T) {
	tests := map[string]struct {
		md      metadata.MD
		want    string
		wantErr error
	}{
		"the clusterid header is returned": {
			md:   metadata.Pairs("clusterid", "east"),
			want: "east",
		},
		"no header means no cluster": {
			md: metadata.Pairs("authorization", "Bearer x"),
		},
		"two values are malformed": {
			md:      metadata.Pairs("clusterid", "east", "clusterid", "west"),
			wantErr: ErrMalformedMetadata,
		},
		"an oversized value is malformed": {
			md:      metadata.Pairs("clusterid", strings.Repeat("c", maxClusterIDSize+1)),
			wantErr: ErrMalformedMetadata,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ClusterID(metadata.NewIncomingContext(context.Background(), tc.md))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ClusterID() error = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ClusterID() = %q, want %q", got, tc.want)
			}
		})
	}
}
