package kube

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/bulwark-mesh/bulwark/internal/testenv"
	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

// bearer returns a context carrying token as gRPC metadata, as a caller of
// the CSR API sends it.
func bearer(token string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
}

// kubeJWT returns a TokenReview authenticator and the clock its review
// cache reads.
func kubeJWT(t *testing.T, env *testenv.Env, requirePodBound bool) (*authn.KubeJWT, *catest.Clock) {
	clock := catest.NewClock(time.Now())
	return authn.NewKubeJWT(authn.KubeJWTConfig{
		TrustDomain:     td,
		Reviewer:        authn.NewClientGoReviewer(env.Client(t)),
		RequirePodBound: requirePodBound,
		Clock:           clock.Now,
	}), clock
}

func saID(ns, sa string) spiffeid.ID {
	return spiffeid.RequireFromSegments(td, "ns", ns, "sa", sa)
}

// pod creates a pod running as sa; it is never scheduled, which is all a
// bound token needs.
func pod(t *testing.T, env *testenv.Env, ns, sa string) *corev1.Pod {
	t.Helper()
	p, err := env.Client(t).CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			Containers:         []corev1.Container{{Name: "app", Image: "registry.invalid/app"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	return p
}

func wantIdentity(t *testing.T, caller *authn.Caller, err error, want spiffeid.ID) {
	t.Helper()
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if len(caller.Identities) != 1 || caller.Identities[0] != want {
		t.Fatalf("identities %v; want [%v]", caller.Identities, want)
	}
}

func wantRefused(t *testing.T, err error, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("Authenticate = %v; want a refusal wrapping %v", err, want)
	}
}

func TestKubeJWTAuthenticatesTokenRequestTokens(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	for name, tc := range map[string]struct {
		audiences []string
		refusal   error // nil: accepted
	}{
		"a token for istio-ca is the service account's identity": {audiences: []string{"istio-ca"}},
		"a token for istio-ca among others is accepted":          {audiences: []string{"other", "istio-ca"}},
		"a token for another audience is refused":                {audiences: []string{"other"}, refusal: authn.ErrInvalidToken},
		"a token for the API server itself is refused":           {audiences: nil, refusal: authn.ErrInvalidToken},
	} {
		t.Run(name, func(t *testing.T) {
			a, _ := kubeJWT(t, env, false)
			caller, err := a.Authenticate(bearer(env.ServiceAccountToken(t, ns, "app", tc.audiences, nil)))
			if tc.refusal != nil {
				wantRefused(t, err, tc.refusal)
				return
			}
			wantIdentity(t, caller, err, saID(ns, "app"))
			if caller.Authenticator != authn.KindKubernetes || caller.Pod != nil {
				t.Errorf("caller %+v; want kind kubernetes and no pod", caller)
			}
		})
	}
}

func TestKubeJWTRefusesTheTokenOfADeletedServiceAccount(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	token := env.ServiceAccountToken(t, ns, "doomed", []string{"istio-ca"}, nil)
	a, clock := kubeJWT(t, env, false)
	caller, err := a.Authenticate(bearer(token))
	wantIdentity(t, caller, err, saID(ns, "doomed"))

	if err := env.Client(t).CoreV1().ServiceAccounts(ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := refusedEventually(t, a, clock, token)
	t.Logf("the token of the deleted service account was refused %v after the deletion", took)
}

// refusedEventually authenticates token until it is refused, and returns
// how long that took. A review is reused for at most the authenticator's
// cache TTL, which each attempt skips by moving the clock; the API server
// itself caches a successful authentication for up to 10s.
func refusedEventually(t *testing.T, a *authn.KubeJWT, clock *catest.Clock, token string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		clock.Advance(authn.DefaultCacheTTL + time.Second)
		_, err := a.Authenticate(bearer(token))
		if err != nil || time.Now().After(deadline) {
			wantRefused(t, err, authn.ErrInvalidToken)
			return time.Since(start).Round(100 * time.Millisecond)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func TestKubeJWTPodBoundTokens(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	unbound := env.ServiceAccountToken(t, ns, "app", []string{"istio-ca"}, nil) // also creates the account
	p := pod(t, env, ns, "app")
	bound := env.ServiceAccountToken(t, ns, "app", []string{"istio-ca"}, p)

	t.Run("the caller carries the pod's name and uid", func(t *testing.T) {
		a, _ := kubeJWT(t, env, false)
		caller, err := a.Authenticate(bearer(bound))
		wantIdentity(t, caller, err, saID(ns, "app"))
		if caller.Pod == nil || caller.Pod.Name != p.Name || caller.Pod.UID != string(p.UID) {
			t.Errorf("pod %+v; want %s uid %s", caller.Pod, p.Name, p.UID)
		}
	})
	t.Run("RequirePodBound refuses an unbound token and accepts a bound one", func(t *testing.T) {
		a, _ := kubeJWT(t, env, true)
		_, err := a.Authenticate(bearer(unbound))
		wantRefused(t, err, authn.ErrInvalidToken)
		caller, err := a.Authenticate(bearer(bound))
		wantIdentity(t, caller, err, saID(ns, "app"))
	})
	t.Run("the token is refused once the pod is deleted", func(t *testing.T) {
		a, clock := kubeJWT(t, env, true)
		caller, err := a.Authenticate(bearer(bound))
		wantIdentity(t, caller, err, saID(ns, "app"))
		err = env.Client(t).CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		if err != nil {
			t.Fatal(err)
		}
		took := refusedEventually(t, a, clock, bound)
		t.Logf("the token of the deleted pod was refused %v after the deletion", took)
	})
}

func TestOIDCAuthenticatesByTheAPIServersIssuer(t *testing.T) {
	t.Parallel()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	rule, err := authn.ParseJWTRule(`{"issuer": "` + env.Issuer + `", "audiences": ["istio-ca"]}`)
	if err != nil {
		t.Fatal(err)
	}
	roots := env.HTTPClient().Transport.(*http.Transport).TLSClientConfig.RootCAs
	o := authn.NewOIDC(authn.OIDCConfig{TrustDomain: td, Rule: rule, Fetch: keyfetch.Config{RootCAs: roots}})
	p := pod(t, env, ns, "default")
	for name, tc := range map[string]struct {
		audiences []string
		pod       *corev1.Pod
		refusal   error
	}{
		"a token for istio-ca is accepted":          {audiences: []string{"istio-ca"}},
		"a pod-bound token names its pod":           {audiences: []string{"istio-ca"}, pod: p},
		"a token for another audience is refused":   {audiences: []string{"other"}, refusal: authn.ErrInvalidToken},
		"a token for the API server is refused too": {audiences: nil, refusal: authn.ErrInvalidToken},
	} {
		t.Run(name, func(t *testing.T) {
			caller, err := o.Authenticate(bearer(env.ServiceAccountToken(t, ns, "default", tc.audiences, tc.pod)))
			if tc.refusal != nil {
				wantRefused(t, err, tc.refusal)
				return
			}
			wantIdentity(t, caller, err, saID(ns, "default"))
			if caller.Authenticator != authn.KindOIDC {
				t.Errorf("authenticator %q; want %q", caller.Authenticator, authn.KindOIDC)
			}
			if tc.pod != nil && (caller.Pod == nil || caller.Pod.UID != string(tc.pod.UID)) {
				t.Errorf("pod %+v; want uid %s", caller.Pod, tc.pod.UID)
			}
		})
	}
}
