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
// Concurrent checks of the same account and Secret share one review.
type SARAuthorizer struct {
	reviews authzclient.SubjectAccessReviewInterface
	ttl     time.Duration
	max     int
	now     func() time.Time

	mu       sync.Mutex
	cache    map[authzKey]authzEntry
	inflight map[authzKey]*authzCall
}

type authzKey struct{ namespace, serviceAccount, secret string }

type authzEntry struct {
	allowed bool
	expires time.Time
}

// authzCall is a review under way, which callers asking the same join.
type authzCall struct {
	done    chan struct{} // closed when allowed and err are set
	allowed bool
	err     error
	joined  int // callers beside the first; guarded by SARAuthorizer.mu
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
	return &SARAuthorizer{
		reviews: reviews, ttl: ttl, max: max, now: clock,
		cache: map[authzKey]authzEntry{}, inflight: map[authzKey]*authzCall{},
	}
}

// CanReadSecret implements Authorizer.
func (a *SARAuthorizer) CanReadSecret(ctx context.Context, ns, sa, secret string) (bool, error) {
	key := authzKey{ns, sa, secret}
	now := a.now()
	a.mu.Lock()
	if e, ok := a.cache[key]; ok && now.Before(e.expires) {
		a.mu.Unlock()
		return e.allowed, nil
	}
	c, joined := a.inflight[key]
	if joined {
		c.joined++
	} else {
		c = &authzCall{done: make(chan struct{})}
		a.inflight[key] = c
	}
	a.mu.Unlock()
	if !joined {
		// Others may be waiting for this review: the first caller's
		// going away does not cancel it.
		c.allowed, c.err = a.review(context.WithoutCancel(ctx), key)
		a.mu.Lock()
		delete(a.inflight, key)
		if c.err == nil {
			a.storeLocked(key, authzEntry{allowed: c.allowed, expires: now.Add(a.ttl)}, now)
		}
		a.mu.Unlock()
		close(c.done)
	}
	select {
	case <-c.done:
		return c.allowed, c.err
	case <-ctx.Done():
		return false, fmt.Errorf("subject access review: %w", ctx.Err())
	}
}

func (a *SARAuthorizer) review(ctx context.Context, key authzKey) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, authzTimeout)
	defer cancel()
	ns := key.namespace
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + ns + ":" + key.serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "get", Resource: "secrets", Name: key.secret,
		},
	}}
	resp, err := a.reviews.Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	return resp.Status.Allowed && !resp.Status.Denied, nil
}

func (a *SARAuthorizer) storeLocked(key authzKey, e authzEntry, now time.Time) {
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
