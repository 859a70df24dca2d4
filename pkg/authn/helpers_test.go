package authn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

var (
	testTD = spiffeid.RequireTrustDomainFromString("cluster.local")
	// t0 is the fixed "now" of the tests.
	t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
)

// mdContext returns a context with incoming gRPC metadata of key/value pairs.
func mdContext(kv ...string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
}

// bearerContext returns a context carrying "authorization: Bearer token".
func bearerContext(token string, kv ...string) context.Context {
	return mdContext(append([]string{"authorization", "Bearer " + token}, kv...)...)
}

// tlsPeerContext returns ctx with a TLS peer that presented certs.
func tlsPeerContext(ctx context.Context, certs ...*x509.Certificate) context.Context {
	return peer.NewContext(ctx, &peer.Peer{
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: certs}},
	})
}

// unsignedJWT returns a compact JWS with the given claims and a bogus
// signature, for authenticators that do not check signatures themselves.
func unsignedJWT(t testing.TB, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc.EncodeToString(payload) + ".c2ln"
}

func mustID(t testing.TB, s string) spiffeid.ID {
	t.Helper()
	id, err := spiffeid.FromString(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// wantCaller is what an Authenticate call should give: an error matching
// err, or a caller with exactly identity id, found by kind, with clusterID
// and pod (nil: no pod).
type wantCaller struct {
	err       error
	id        string
	kind      string
	clusterID string
	pod       *Pod
}

// checkCaller checks an Authenticate result. It reports whether the caller
// was accepted, so that a test can check more of it.
func checkCaller(t *testing.T, caller *Caller, err error, want wantCaller) bool {
	t.Helper()
	if want.err != nil {
		if !errors.Is(err, want.err) {
			t.Fatalf("Authenticate() error = %v, want %v", err, want.err)
		}
		t.Logf("refused: %v", err)
		return false
	}
	if err != nil {
		t.Fatalf("Authenticate() error = %v", err)
	}
	if len(caller.Identities) != 1 || caller.Identities[0].String() != want.id {
		t.Errorf("Identities = %v, want [%s]", caller.Identities, want.id)
	}
	if caller.Authenticator != want.kind || caller.ClusterID != want.clusterID {
		t.Errorf("Authenticator, ClusterID = %q, %q; want %q, %q", caller.Authenticator, caller.ClusterID, want.kind, want.clusterID)
	}
	if (caller.Pod == nil) != (want.pod == nil) || (caller.Pod != nil && *caller.Pod != *want.pod) {
		t.Errorf("Pod = %+v, want %+v", caller.Pod, want.pod)
	}
	return true
}
