package authn

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// apiServer fakes the TokenReview API: it knows one token.
func apiServer(t *testing.T, knownToken string, failWith error) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if failWith != nil {
			return true, nil, failWith
		}
		req := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		resp := req.DeepCopy()
		if req.Spec.Token != knownToken {
			resp.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			return true, resp, nil
		}
		resp.Status = authenticationv1.TokenReviewStatus{
			Authenticated: true,
			Audiences:     req.Spec.Audiences,
			User: authenticationv1.UserInfo{
				Username: "system:serviceaccount:default:httpbin",
				Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{
					extraPodName: {"httpbin-7d9c"},
					extraPodUID:  {"0b9f-uid"},
				},
			},
		}
		return true, resp, nil
	})
	return client
}

func TestClientGoReviewer(t *testing.T) {
	tests := map[string]struct {
		token     string
		failWith  error
		want      *TokenReview
		wantError bool
	}{
		"a known token is authenticated with its user and audiences": {
			token: "known",
			want: &TokenReview{
				Authenticated: true,
				Audiences:     []string{"istio-ca"},
				Username:      "system:serviceaccount:default:httpbin",
				Groups:        []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
				Extra:         map[string][]string{extraPodName: {"httpbin-7d9c"}, extraPodUID: {"0b9f-uid"}},
			},
		},
		"an unknown token is reviewed as unauthenticated": {
			token: "unknown",
			want:  &TokenReview{Error: "invalid bearer token"},
		},
		"an API error is returned as an error": {
			token:     "known",
			failWith:  errors.New("etcdserver: request timed out"),
			wantError: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := NewClientGoReviewer(apiServer(t, "known", tc.failWith))
			got, err := r.Review(context.Background(), tc.token, []string{"istio-ca"})
			if tc.wantError {
				if err == nil {
					t.Fatalf("Review() = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Authenticated != tc.want.Authenticated || got.Username != tc.want.Username || got.Error != tc.want.Error ||
				!slices.Equal(got.Audiences, tc.want.Audiences) || !slices.Equal(got.Groups, tc.want.Groups) ||
				len(got.Extra) != len(tc.want.Extra) {
				t.Fatalf("Review() = %+v, want %+v", got, tc.want)
			}
			for k, v := range tc.want.Extra {
				if !slices.Equal(got.Extra[k], v) {
					t.Errorf("Extra[%q] = %q, want %q", k, got.Extra[k], v)
				}
			}
		})
	}
}

func TestKubeJWTThroughClientGo(t *testing.T) {
	token := unsignedJWT(t, map[string]any{"exp": t0.Add(time.Hour).Unix()})
	k := NewKubeJWT(KubeJWTConfig{
		TrustDomain:     testTD,
		Reviewer:        NewClientGoReviewer(apiServer(t, token, nil)),
		RequirePodBound: true,
		Clock:           func() time.Time { return t0 },
	})
	caller, err := k.Authenticate(bearerContext(token))
	if err != nil {
		t.Fatal(err)
	}
	if caller.Identities[0].String() != workloadID || caller.Pod == nil || caller.Pod.UID != "0b9f-uid" {
		t.Errorf("caller = %+v", caller)
	}
	if _, err := k.Authenticate(bearerContext("forged." + token)); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("unknown token: error = %v, want %v", err, ErrInvalidToken)
	}
	down := NewKubeJWT(KubeJWTConfig{TrustDomain: testTD, Reviewer: NewClientGoReviewer(apiServer(t, token, errors.New("connection refused")))})
	if _, err := down.Authenticate(bearerContext(token)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("API server down: error = %v, want %v", err, ErrUnavailable)
	}
}
