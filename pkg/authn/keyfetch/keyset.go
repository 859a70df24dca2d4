package keyfetch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Reasons VerifySignature refuses a token.
var (
	// ErrNoKeys: the issuer's keys have never been fetched; nothing can be
	// accepted until they are.
	ErrNoKeys = errors.New("no keys from the issuer")
	// ErrNoMatchingKey: no key of the issuer verifies the token: its kid is
	// unknown or its signature is bad.
	ErrNoMatchingKey = errors.New("no key verifies the token")
	// ErrMalformedToken: the token is not a compact JWS with one signature
	// by an accepted algorithm.
	ErrMalformedToken = errors.New("malformed token")
)

// KeySet is the signing keys of one issuer, fetched on first use and
// refreshed when a token names a key it does not hold or its keys are older
// than the refresh interval — at most once per interval, by one fetch that
// concurrent callers share.
type KeySet struct {
	c       *Client
	issuer  string
	jwksURI string // configured; empty means discover it at issuer
	rule    URLRule
	algs    []jose.SignatureAlgorithm

	mu        sync.Mutex
	keys      []jose.JSONWebKey
	fetchedAt time.Time     // of keys
	attempted time.Time     // of the last fetch started
	inflight  chan struct{} // closed when the running fetch ends
	lastErr   error         // of the last fetch
	fetched   func()        // called after keys are fetched; may be nil
}

// KeySet returns the key set of issuer, published at jwksURI, or found by
// OIDC discovery at issuer when jwksURI is empty. Tokens must be signed by
// one of algs. The issuer is the operator's: its URLs pass CheckURL. It
// does no I/O.
func (c *Client) KeySet(issuer, jwksURI string, algs []string) *KeySet {
	ks := &KeySet{c: c, issuer: issuer, jwksURI: jwksURI, rule: URLRule{LoopbackHTTP: true}}
	for _, a := range algs {
		ks.algs = append(ks.algs, jose.SignatureAlgorithm(a))
	}
	return ks
}

// OnFetched has fn called each time keys are fetched anew, before any
// caller verifies with them, and returns ks. It is set before ks is used.
func (ks *KeySet) OnFetched(fn func()) *KeySet {
	ks.fetched = fn
	return ks
}

// VerifySignature checks the signature of a compact JWS and returns its
// payload. Claims are not looked at. Its errors wrap ErrMalformedToken,
// ErrNoKeys (with the last fetch's failure) or ErrNoMatchingKey.
func (ks *KeySet) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	jws, err := jose.ParseSigned(token, ks.algs)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, ErrMalformedToken
	}
	kid := jws.Signatures[0].Header.KeyID
	keys, stale := ks.current()
	if !stale {
		if payload, ok := verifyWith(jws, keys, kid); ok {
			return payload, nil
		}
	}
	keys, err = ks.refresh(ctx)
	if keys == nil {
		return nil, fmt.Errorf("%w: %w", ErrNoKeys, err)
	}
	if payload, ok := verifyWith(jws, keys, kid); ok {
		return payload, nil
	}
	return nil, fmt.Errorf("kid %q: %w", truncate(kid, 64), ErrNoMatchingKey)
}

// current returns the keys held and whether they are older than the
// refresh interval.
func (ks *KeySet) current() ([]jose.JSONWebKey, bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.keys, ks.keys == nil || ks.c.cfg.Clock().Sub(ks.fetchedAt) >= ks.c.cfg.RefreshInterval
}

// refresh fetches the key set, or joins the fetch already running, unless
// the last one started less than an interval ago: the refresh interval
// while keys are held, the retry interval while none are. It returns the
// keys held afterwards, new or not, and why no new ones were fetched.
func (ks *KeySet) refresh(ctx context.Context) ([]jose.JSONWebKey, error) {
	ks.mu.Lock()
	done := ks.inflight
	if done == nil {
		wait := ks.c.cfg.RefreshInterval
		if ks.keys == nil {
			wait = ks.c.cfg.RetryInterval
		}
		now := ks.c.cfg.Clock()
		if !ks.attempted.IsZero() && now.Sub(ks.attempted) < wait {
			defer ks.mu.Unlock()
			err := ks.lastErr
			if err == nil {
				err = errors.New("key set fetched recently")
			}
			return ks.keys, fmt.Errorf("not refetched before %s: %w", ks.attempted.Add(wait).Format(time.RFC3339), err)
		}
		ks.attempted = now
		done = make(chan struct{})
		ks.inflight = done
		// The fetch outlives a caller that gives up: the others share it.
		go ks.fetch(context.WithoutCancel(ctx), done)
	}
	ks.mu.Unlock()
	var waitErr error
	select {
	case <-done:
	case <-ctx.Done():
		waitErr = fmt.Errorf("wait for key set: %w", ctx.Err())
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if waitErr != nil {
		return ks.keys, waitErr
	}
	return ks.keys, ks.lastErr
}

// fetch runs one fetch and records its outcome. Failed fetches keep the
// keys held.
func (ks *KeySet) fetch(ctx context.Context, done chan struct{}) {
	keys, uri, err := ks.fetchKeys(ctx)
	if err != nil {
		ks.c.cfg.Logger.Warn("fetching the issuer's keys failed", "issuer", ks.issuer, "error", err)
	} else {
		ks.c.cfg.Logger.Info("fetched the issuer's keys", "issuer", ks.issuer, "jwks_uri", uri, "keys", len(keys))
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.lastErr = err
	if err == nil {
		if ks.keys != nil && ks.fetched != nil {
			ks.fetched() // nothing was verified before the first keys
		}
		ks.keys, ks.fetchedAt = keys, ks.c.cfg.Clock()
	}
	ks.inflight = nil
	close(done)
}

// fetchKeys discovers the key set's URL when none is configured, then
// fetches and parses the key set.
func (ks *KeySet) fetchKeys(ctx context.Context) ([]jose.JSONWebKey, string, error) {
	uri := ks.jwksURI
	if uri == "" {
		wellKnown := discoveryURL(ks.issuer)
		body, err := ks.c.get(ctx, wellKnown, ks.rule)
		if err != nil {
			return nil, "", fmt.Errorf("discover issuer: %w", err)
		}
		if uri, err = parseDiscovery(body, ks.issuer, ks.rule); err != nil {
			return nil, "", fmt.Errorf("discover issuer at %s: %w", wellKnown, err)
		}
	}
	body, err := ks.c.get(ctx, uri, ks.rule)
	if err != nil {
		return nil, "", err
	}
	keys, err := parseKeySet(body)
	if err != nil {
		return nil, "", fmt.Errorf("key set at %s: %w", uri, err)
	}
	return keys, uri, nil
}

// discoveryURL is where issuer publishes its OIDC discovery document.
func discoveryURL(issuer string) string {
	return strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
}

// verifyWith tries the keys named kid, or every key when kid is empty.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) ([]byte, bool) {
	for _, k := range keys {
		if kid != "" && k.KeyID != kid {
			continue
		}
		if payload, err := jws.Verify(k.Key); err == nil {
			return payload, true
		}
	}
	return nil, false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
