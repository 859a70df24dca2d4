package authn

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"golang.org/x/sync/singleflight"
)

// Defaults for KubeJWTConfig. A positive review is reused for at most
// DefaultCacheTTL, which bounds how long a token of a deleted pod or service
// account keeps working past the API server's own revocation.
const (
	DefaultKubeJWTAudience = "istio-ca"
	DefaultCacheSize       = 4096
	DefaultCacheTTL        = time.Minute
)

// Extra keys the API server sets on reviews of pod-bound tokens.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// serviceAccountsGroup is the group of every service account.
const serviceAccountsGroup = "system:serviceaccounts"

// KubeJWTConfig configures a KubeJWT.
type KubeJWTConfig struct {
	// TrustDomain is the trust domain of the identities granted.
	TrustDomain spiffeid.TrustDomain
	// Reviewer authenticates tokens with istiod's own API server.
	Reviewer TokenReviewer
	// ClusterID is istiod's own cluster ID: a token whose "clusterid"
	// header is empty or this ID is reviewed by Reviewer.
	ClusterID string
	// Remote gives the reviewer of a remote cluster a token's "clusterid"
	// header names; nil: only local tokens are accepted.
	Remote RemoteReviewers
	// Aliases are old cluster IDs standing for current ones (Istio's
	// --clusterAliases): a header naming an alias is the aliased
	// cluster's, reviewed there and recorded as that cluster.
	Aliases ClusterAliases
	// Audiences are the audiences a token must be valid for; at least one
	// must be confirmed by the review. Default: ["istio-ca"].
	Audiences []string
	// RequirePodBound refuses tokens not bound to a pod.
	RequirePodBound bool
	// CacheSize bounds the number of cached reviews. Default: 4096.
	CacheSize int
	// CacheTTL is the longest a successful review is reused. Default: 5m.
	CacheTTL time.Duration
	// Clock tells the time. Default: time.Now.
	Clock func() time.Time
}

// KubeJWT authenticates callers by a Kubernetes service-account token,
// reviewed by the API server.
type KubeJWT struct {
	cfg   KubeJWTConfig
	cache *expiringCache[reviewResult]
	// inflight shares one review among concurrent requests with one token,
	// so a burst of agents restarting together costs one API call each.
	inflight singleflight.Group
}

// reviewTimeout bounds a TokenReview shared by concurrent requests.
const reviewTimeout = 10 * time.Second

// reviewResult is what a successful review proves.
type reviewResult struct {
	id  spiffeid.ID
	pod *Pod
}

var _ Authenticator = (*KubeJWT)(nil)

// NewKubeJWT returns a KubeJWT with cfg's zero fields set to their defaults.
func NewKubeJWT(cfg KubeJWTConfig) *KubeJWT {
	if len(cfg.Audiences) == 0 {
		cfg.Audiences = []string{DefaultKubeJWTAudience}
	} else {
		cfg.Audiences = slices.Clone(cfg.Audiences)
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.Aliases = maps.Clone(cfg.Aliases)
	return &KubeJWT{cfg: cfg, cache: newExpiringCache[reviewResult](cfg.CacheSize)}
}

// Kind implements Authenticator.
func (*KubeJWT) Kind() string { return KindKubernetes }

// Authenticate implements Authenticator. The token is reviewed by the API
// server of the cluster its "clusterid" header names: istiod's own when
// the header is empty or istiod's ID, a registered remote cluster's
// otherwise, an alias (Aliases) standing for the cluster it names. A
// cluster that is neither is refused (ErrUnknownCluster)
// without any review; a known cluster whose API server cannot be reached
// fails with ErrUnavailable. The Caller records the cluster that reviewed.
func (k *KubeJWT) Authenticate(ctx context.Context) (*Caller, error) {
	return authenticateBearer(ctx, func(ctx context.Context, token, claimed string) (*Caller, error) {
		cluster, reviewer, err := k.reviewerFor(claimed)
		if err != nil {
			return nil, err
		}
		res, err := k.authenticateToken(ctx, cluster, reviewer, token)
		if err != nil {
			return nil, err
		}
		return &Caller{Identities: []spiffeid.ID{res.id}, Authenticator: KindKubernetes, Pod: res.pod, ClusterID: cluster}, nil
	})
}

// reviewerFor picks the cluster and reviewer for a claimed cluster ID,
// an alias standing for its cluster. Istio tries a remote cluster
// registered under the claimed ID before the alias; here an alias always
// wins, as it does for the node metadata CLUSTER_ID in both, and no
// remote cluster is registered under an alias.
func (k *KubeJWT) reviewerFor(claimed string) (string, TokenReviewer, error) {
	claimed = k.cfg.Aliases.Resolve(claimed)
	if claimed == "" || claimed == k.cfg.ClusterID {
		if k.cfg.Reviewer == nil {
			return "", nil, fmt.Errorf("review token: no reviewer configured: %w", ErrUnavailable)
		}
		return k.cfg.ClusterID, k.cfg.Reviewer, nil
	}
	if k.cfg.Remote != nil {
		if r, ok := k.cfg.Remote.Reviewer(claimed); ok && r != nil {
			return claimed, r, nil
		}
	}
	return "", nil, fmt.Errorf("review token: cluster %q: %w", claimed, ErrUnknownCluster)
}

// authenticateToken has cluster's reviewer review token, or reuses a review
// of it by that cluster that is still fresh.
func (k *KubeJWT) authenticateToken(ctx context.Context, cluster string, reviewer TokenReviewer, token string) (reviewResult, error) {
	if len(token) > MaxTokenSize {
		return reviewResult{}, fmt.Errorf("review token: %d bytes, limit %d: %w", len(token), MaxTokenSize, ErrTokenTooLarge)
	}
	key := reviewKey(cluster, token)
	if res, ok := k.cache.get(key, k.cfg.Clock()); ok {
		return res.clone(), nil
	}
	// The shared review must not end with the first caller's context.
	ch := k.inflight.DoChan(string(key[:]), func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		return k.review(rctx, reviewer, key, token)
	})
	select {
	case <-ctx.Done():
		return reviewResult{}, fmt.Errorf("review token: %w: %w", ErrUnavailable, ctx.Err())
	case r := <-ch:
		if r.Err != nil {
			return reviewResult{}, r.Err
		}
		return r.Val.(reviewResult).clone(), nil
	}
}

// review asks the API server about token and caches a success.
func (k *KubeJWT) review(ctx context.Context, reviewer TokenReviewer, key [32]byte, token string) (reviewResult, error) {
	review, err := reviewer.Review(ctx, token, slices.Clone(k.cfg.Audiences))
	if err != nil {
		return reviewResult{}, fmt.Errorf("review token: %w: %w", ErrUnavailable, err)
	}
	if review == nil {
		return reviewResult{}, fmt.Errorf("review token: no review returned: %w", ErrUnavailable)
	}
	res, err := k.check(review)
	if err != nil {
		return reviewResult{}, fmt.Errorf("review token: %w", err)
	}
	if exp, ok := unverifiedExpiry(token); ok {
		now := k.cfg.Clock()
		expires := now.Add(k.cfg.CacheTTL)
		if exp.Before(expires) {
			expires = exp
		}
		if expires.After(now) {
			k.cache.put(key, res.clone(), expires)
		}
	}
	return res, nil
}

// check turns an API server review into the identity it proves.
func (k *KubeJWT) check(r *TokenReview) (reviewResult, error) {
	if !r.Authenticated {
		return reviewResult{}, fmt.Errorf("not authenticated: %q: %w", r.Error, ErrInvalidToken)
	}
	if !intersects(r.Audiences, k.cfg.Audiences) {
		return reviewResult{}, fmt.Errorf("audiences %q, want one of %q: %w", r.Audiences, k.cfg.Audiences, ErrInvalidToken)
	}
	if !slices.Contains(r.Groups, serviceAccountsGroup) {
		return reviewResult{}, fmt.Errorf("user %q not in group %s: %w", r.Username, serviceAccountsGroup, ErrInvalidIdentity)
	}
	id, _, err := identityFromUsername(k.cfg.TrustDomain, r.Username)
	if err != nil {
		return reviewResult{}, err
	}
	pod, err := boundPod(r.Extra)
	if err != nil {
		return reviewResult{}, err
	}
	if pod == nil && k.cfg.RequirePodBound {
		return reviewResult{}, fmt.Errorf("token of %q is not bound to a pod: %w", r.Username, ErrInvalidToken)
	}
	return reviewResult{id: id, pod: pod}, nil
}

// reviewKey keys the review of token by cluster: a review by one cluster
// proves nothing in another. The cluster ID is length-prefixed so that no
// (cluster, token) pair can collide with another.
func reviewKey(cluster, token string) [32]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(cluster)))
	h.Write(n[:])
	h.Write([]byte(cluster))
	h.Write([]byte(token))
	var key [32]byte
	h.Sum(key[:0])
	return key
}

// boundPod reads the pod a token is bound to from a review's extra fields.
func boundPod(extra map[string][]string) (*Pod, error) {
	names, uids := extra[extraPodName], extra[extraPodUID]
	if len(names) == 0 && len(uids) == 0 {
		return nil, nil
	}
	if len(names) != 1 || len(uids) != 1 || names[0] == "" || uids[0] == "" {
		return nil, fmt.Errorf("pod binding: names %q, uids %q: %w", names, uids, ErrInvalidToken)
	}
	return &Pod{Name: names[0], UID: uids[0]}, nil
}

// clone copies r so that callers cannot change a cached Pod.
func (r reviewResult) clone() reviewResult {
	if r.pod != nil {
		p := *r.pod
		r.pod = &p
	}
	return r
}

// intersects reports whether a and b share an element.
func intersects(a, b []string) bool {
	for _, s := range a {
		if slices.Contains(b, s) {
			return true
		}
	}
	return false
}
