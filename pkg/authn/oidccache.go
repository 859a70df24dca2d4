package authn

import (
	"context"
	"crypto/sha256"
	"slices"
	"sync"
	"time"
)

// Defaults of the OIDC authenticator's verified-token cache. An agent sends
// the same token with every request until it is refreshed, so a token seen
// before is recognised by its hash instead of a signature check. An entry
// lives at most DefaultOIDCCacheTTL and never past the token's exp.
const (
	DefaultOIDCCacheSize = 4096
	DefaultOIDCCacheTTL  = time.Minute
)

// verifiedTokens remembers the callers of recently verified OIDC tokens,
// keyed by the token's SHA-256. clear drops them all; a verification that
// began before a clear is not remembered after it.
type verifiedTokens struct {
	maxAge time.Duration
	mu     sync.RWMutex // write-held by clear; read-held while an entry is added
	gen    uint64
	cache  *expiringCache[Caller]
}

func newVerifiedTokens(size int, maxAge time.Duration) *verifiedTokens {
	return &verifiedTokens{maxAge: maxAge, cache: newExpiringCache[Caller](size)}
}

// generation is the number of clears so far; put takes it to refuse a
// result obtained before the last clear.
func (v *verifiedTokens) generation() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.gen
}

// get returns a copy of the caller of token's hash key, if remembered and
// fresh at now.
func (v *verifiedTokens) get(key [32]byte, now time.Time) (*Caller, bool) {
	c, ok := v.cache.get(key, now)
	if !ok {
		return nil, false
	}
	return c.clone(), true
}

// put remembers c for key until exp, or for maxAge if sooner, unless the
// cache was cleared since gen.
func (v *verifiedTokens) put(key [32]byte, c *Caller, gen uint64, now, exp time.Time) {
	expires := now.Add(v.maxAge)
	if exp.Before(expires) {
		expires = exp
	}
	if !expires.After(now) {
		return
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.gen != gen {
		return
	}
	v.cache.put(key, *c.clone(), expires)
}

// clear forgets every token.
func (v *verifiedTokens) clear() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gen++
	v.cache.clear()
}

// clone copies c so that no caller can change a remembered one.
func (c *Caller) clone() *Caller {
	out := *c
	out.Identities = slices.Clone(c.Identities)
	if c.Pod != nil {
		p := *c.Pod
		out.Pod = &p
	}
	return &out
}

// verifyCached is verify behind the verified-token cache.
func (o *OIDC) verifyCached(ctx context.Context, token string) (*Caller, error) {
	if len(token) > MaxTokenSize {
		return o.verify(ctx, token) // refused there, before any hashing
	}
	key := sha256.Sum256([]byte(token))
	if c, ok := o.tokens.get(key, o.cfg.Clock()); ok {
		return c, nil
	}
	gen := o.tokens.generation()
	c, err := o.verify(ctx, token)
	if err != nil {
		return nil, err
	}
	// verify accepted the token, exp included, so its exp claim is authentic.
	if exp, ok := unverifiedExpiry(token); ok {
		o.tokens.put(key, c, gen, o.cfg.Clock(), exp)
	}
	return c, nil
}
