package authn

import (
	"errors"
	"testing"
	"time"
)

// clusters is a RemoteReviewers over a fixed map.
func clusters(m map[string]TokenReviewer) RemoteReviewers {
	return RemoteReviewersFunc(func(id string) (TokenReviewer, bool) {
		r, ok := m[id]
		return r, ok
	})
}

func TestKubeJWTReviewsInTheClusterTheHeaderNames(t *testing.T) {
	token := unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix()})
	refusing := &TokenReview{Authenticated: false, Error: "invalid bearer token"}
	tests := map[string]struct {
		header            []string
		localOK, remoteOK bool
		remoteDown        bool
		wantErr           error
		wantCluster       string
		wantLocal         int
		wantRemote        int
	}{
		"no header: reviewed locally, recorded as the local cluster": {
			localOK: true, wantCluster: "A", wantLocal: 1},
		"the local ID: reviewed locally": {
			header: []string{"clusterid", "A"}, localOK: true, wantCluster: "A", wantLocal: 1},
		"a remote ID: reviewed in that cluster only": {
			header: []string{"clusterid", "B"}, remoteOK: true, localOK: true, wantCluster: "B", wantRemote: 1},
		"a remote token sent with the local ID is refused by the local API server": {
			header: []string{"clusterid", "A"}, remoteOK: true, wantErr: ErrInvalidToken, wantLocal: 1},
		"a local token sent with a remote ID is refused by the remote API server": {
			header: []string{"clusterid", "B"}, localOK: true, wantErr: ErrInvalidToken, wantRemote: 1},
		// Before remote clusters, this token was accepted and logged as
		// cluster=nowhere.
		"a local token sent with an unknown cluster is refused with no review": {
			header: []string{"clusterid", "nowhere"}, localOK: true, wantErr: ErrUnknownCluster},
		"a known cluster whose API server is down is unavailable, not unauthenticated": {
			header: []string{"clusterid", "B"}, remoteDown: true, wantErr: ErrUnavailable, wantRemote: 1},
		"an alias of the local ID: reviewed locally, recorded as the local cluster": {
			header: []string{"clusterid", "old-a"}, localOK: true, remoteOK: true, wantCluster: "A", wantLocal: 1},
		"an alias of a remote ID: reviewed in that cluster, recorded as it": {
			header: []string{"clusterid", "old-b"}, localOK: true, remoteOK: true, wantCluster: "B", wantRemote: 1},
		"a remote token sent with the local cluster's alias is refused by the local API server": {
			header: []string{"clusterid", "old-a"}, remoteOK: true, wantErr: ErrInvalidToken, wantLocal: 1},
		"an alias of a cluster not registered is an unknown cluster": {
			header: []string{"clusterid", "old-c"}, localOK: true, remoteOK: true, wantErr: ErrUnknownCluster},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			local := &fakeReviewer{review: refusing}
			if tc.localOK {
				local.review = goodReview()
			}
			remote := &fakeReviewer{review: refusing}
			if tc.remoteOK {
				remote.review = goodReview()
			}
			if tc.remoteDown {
				remote.err = errors.New("dial tcp 10.0.0.2:6443: connect: connection refused")
			}
			k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: local, ClusterID: "A",
				Remote: clusters(map[string]TokenReviewer{"B": remote}), Clock: func() time.Time { return t0 },
				Aliases: ClusterAliases{"old-a": "A", "old-b": "B", "old-c": "C"}})
			caller, err := k.Authenticate(bearerContext(token, tc.header...))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Authenticate = %+v, %v; want %v", caller, err, tc.wantErr)
				}
				if errors.Is(err, ErrUnknownCluster) && errors.Is(err, ErrUnavailable) {
					t.Fatal("an unknown cluster must not be retried as unavailable")
				}
			} else if err != nil {
				t.Fatal(err)
			} else if caller.ClusterID != tc.wantCluster {
				t.Fatalf("ClusterID = %q, want %q", caller.ClusterID, tc.wantCluster)
			}
			if local.Calls() != tc.wantLocal || remote.Calls() != tc.wantRemote {
				t.Fatalf("reviews: local %d, remote %d; want %d, %d", local.Calls(), remote.Calls(), tc.wantLocal, tc.wantRemote)
			}
		})
	}
}

// A review cached for (B, token) proves nothing about (A, token).
func TestKubeJWTCacheIsKeyedByCluster(t *testing.T) {
	token := unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix()})
	local := &fakeReviewer{review: &TokenReview{Authenticated: false, Error: "invalid bearer token"}}
	remote := &fakeReviewer{review: goodReview()}
	k := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: local, ClusterID: "A",
		Remote: clusters(map[string]TokenReviewer{"B": remote}), Clock: func() time.Time { return t0 }})
	for range 2 {
		if _, err := k.Authenticate(bearerContext(token, "clusterid", "B")); err != nil {
			t.Fatal(err)
		}
	}
	if remote.Calls() != 1 {
		t.Fatalf("remote reviews = %d, want 1 (the second from cache)", remote.Calls())
	}
	if _, err := k.Authenticate(bearerContext(token, "clusterid", "A")); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("the token reviewed by B was accepted for A: %v", err)
	}
	if _, err := k.Authenticate(bearerContext(token)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("the token reviewed by B was accepted with no header: %v", err)
	}
	if local.Calls() != 2 {
		t.Fatalf("local reviews = %d, want 2", local.Calls())
	}
}

func TestReviewKeysDoNotCollide(t *testing.T) {
	if reviewKey("ab", "c") == reviewKey("a", "bc") || reviewKey("", "x") == reviewKey("x", "") {
		t.Fatal("review keys collide across cluster/token splits")
	}
}
