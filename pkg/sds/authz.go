package sds

import (
	"context"
	"fmt"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Defaults of the SubjectAccessReview cache.
const (
	DefaultAuthzTTL     = 30 * time.Second
	DefaultAuthzEntries = 10000
	authzTimeout        = 5 * time.Second
)

// Authorizer decides whether a service account may read a Secret.
type Authorizer interface {
	CanReadSecret(ctx context.Context, namespace, serviceAccount, secret string) (bool, error)
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, namespace, serviceAccount, secret string) (bool, error)

// CanReadSecret implements Authorizer.
func (f AuthorizerFunc) CanReadSecret(ctx context.Context, ns, sa, secret string) (bool, error) {
	return f(ctx, ns, sa, secret)
}

var (
	_ Authorizer = AuthorizerFunc(nil)
	_ Authorizer = (*SARAuthorizer)(nil)
)

// SARAuthorizer asks the API server with SubjectAccessReviews whether
// system:serviceaccount:<ns>:<sa> may get the Secret, and caches verdicts
// (allowed and denied; not errors) for a short time in a bounded map.
type SARAuthorizer struct {
	reviews authzclient.SubjectAccessReviewInterface
	ttl     time.Duration
	max     int
	now     func() time.Time

	mu    sync.Mutex
	cache map[authzKey]authzEntry
}

type authzKey struct{ namespace, serviceAccount, secret string }

type authzEntry struct {
	allowed bool
	expires time.Time
}

// NewSARAuthorizer returns an authorizer creating reviews with reviews
// (client.AuthorizationV1().SubjectAccessReviews()). Zero ttl and max take
// the defaults; a nil clock is time.Now.
func NewSARAuthorizer(reviews authzclient.SubjectAccessReviewInterface, ttl time.Duration, max int, clock func() time.Time) *SARAuthorizer {
	if ttl <= 0 {
		ttl = DefaultAuthzTTL
	}
	if max <= 0 {
		max = DefaultAuthzEntries
	}
	if clock == nil {
		clock = time.Now
	}
	return &SARAuthorizer{reviews: reviews, ttl: ttl, max: max, now: clock, cache: map[authzKey]authzEntry{}}
}

// CanReadSecret implements Authorizer.
func (a *SARAuthorizer) CanReadSecret(ctx context.Context, ns, sa, secret string) (bool, error) {
	key := authzKey{ns, sa, secret}
	now := a.now()
	a.mu.Lock()
	e, ok := a.cache[key]
	a.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.allowed, nil
	}
	ctx, cancel := context.WithTimeout(ctx, authzTimeout)
	defer cancel()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + ns + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "get", Resource: "secrets", Name: secret,
		},
	}}
	resp, err := a.reviews.Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	allowed := resp.Status.Allowed && !resp.Status.Denied
	a.store(key, authzEntry{allowed: allowed, expires: now.Add(a.ttl)}, now)
	return allowed, nil
}

func (a *SARAuthorizer) store(key authzKey, e authzEntry, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= a.max {
		for k, old := range a.cache {
			if !now.Before(old.expires) {
				delete(a.cache, k)
			}
		}
		for k := range a.cache { // still full: drop arbitrary entries
			if len(a.cache) < a.max {
				break
			}
			delete(a.cache, k)
		}
	}
	a.cache[key] = e
}
