package sds

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// blockingReviews answers SubjectAccessReviews, allowing all, once
// released, and counts them.
type blockingReviews struct {
	authzclient.SubjectAccessReviewInterface // only Create is called
	release                                  chan struct{}
	n                                        atomic.Int64
}

func (b *blockingReviews) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	b.n.Add(1)
	<-b.release
	out := sar.DeepCopy()
	out.Status.Allowed = true
	return out, nil
}

func TestConcurrentChecksShareOneReview(t *testing.T) {
	reviews := &blockingReviews{release: make(chan struct{})}
	a := NewSARAuthorizer(reviews, 0, 0, nil)
	key := authzKey{"gw", "ingress", "tls"}
	const callers = 10
	var (
		wg      sync.WaitGroup
		allowed atomic.Int64
	)
	check := func(ctx context.Context) {
		if ok, err := a.CanReadSecret(ctx, key.namespace, key.serviceAccount, key.secret); ok && err == nil {
			allowed.Add(1)
		}
	}
	wg.Go(func() { check(context.Background()) })
	waitUntil(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.inflight[key] != nil })
	// A caller that goes away gives up alone.
	gone, cancel := context.WithCancel(context.Background())
	wg.Go(func() { check(gone) })
	for range callers - 2 {
		wg.Go(func() { check(context.Background()) })
	}
	waitUntil(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.inflight[key].joined == callers-1 })
	cancel()
	close(reviews.release)
	wg.Wait()
	if n := reviews.n.Load(); n != 1 {
		t.Fatalf("%d reviews for %d concurrent checks, want 1", n, callers)
	}
	if n := allowed.Load(); n < callers-1 {
		t.Fatalf("%d of the callers that stayed were allowed, want %d", n, callers-1)
	}
	if ok, err := a.CanReadSecret(context.Background(), key.namespace, key.serviceAccount, key.secret); !ok || err != nil || reviews.n.Load() != 1 {
		t.Fatalf("the shared verdict was not cached: %v %v, %d reviews", ok, err, reviews.n.Load())
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	(&fixture{t: t}).eventually(cond)
}
