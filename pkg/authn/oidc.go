package authn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
)

// signingAlgs are the algorithms accepted on OIDC tokens: asymmetric only,
// so that neither "none" nor an HMAC keyed with a public key can pass.
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
}

// OIDCConfig configures an OIDC authenticator.
type OIDCConfig struct {
	// TrustDomain is the trust domain of the identities granted.
	TrustDomain spiffeid.TrustDomain
	// Rule names the issuer, its keys and the accepted audiences.
	Rule JWTRule
	// Fetch says how the issuer's keys are fetched: roots, addresses
	// allowed, limits, refresh interval. Its Clock defaults to Clock.
	Fetch keyfetch.Config
	// Clock tells the time. Default: time.Now.
	Clock func() time.Time
	// CacheSize bounds the number of verified tokens remembered. Default:
	// DefaultOIDCCacheSize.
	CacheSize int
	// CacheTTL is the longest a verified token is remembered; never past
	// its exp. Default: DefaultOIDCCacheTTL.
	CacheTTL time.Duration
}

// OIDC authenticates callers by a JWT from a configured OIDC issuer, such as
// a Kubernetes API server's service-account issuer seen from another
// cluster. The token's sub must be system:serviceaccount:<ns>:<sa>.
type OIDC struct {
	cfg       OIDCConfig
	cfgErr    error
	verifyCfg *oidc.Config
	// keys verify signatures. Fetched on first use, from the rule's JWKS URI
	// or the one discovered at the issuer.
	keys oidc.KeySet
	// tokens remembers verified tokens (oidccache.go).
	tokens *verifiedTokens
}

var _ Authenticator = (*OIDC)(nil)

// NewOIDC returns an OIDC authenticator. It does no I/O: keys are fetched,
// and the issuer discovered, on first use. An invalid rule makes every
// Authenticate fail.
func NewOIDC(cfg OIDCConfig) *OIDC {
	return newOIDC(cfg, nil)
}

// newOIDC lets tests supply the key set.
func newOIDC(cfg OIDCConfig, keys oidc.KeySet) *OIDC {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Fetch.Clock == nil {
		cfg.Fetch.Clock = cfg.Clock
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultOIDCCacheSize
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultOIDCCacheTTL
	}
	cfg.Rule.Audiences = slices.Clone(cfg.Rule.Audiences)
	tokens := newVerifiedTokens(cfg.CacheSize, cfg.CacheTTL)
	if keys == nil {
		// A token is recognised only while the keys that verified it are
		// the ones fetched last.
		keys = keyfetch.New(cfg.Fetch).KeySet(cfg.Rule.Issuer, cfg.Rule.JWKSURI, signingAlgs).OnFetched(tokens.clear)
	}
	return &OIDC{
		cfg:    cfg,
		cfgErr: cfg.Rule.Validate(),
		verifyCfg: &oidc.Config{
			SupportedSigningAlgs: signingAlgs,
			// The audience is checked against every accepted value below.
			SkipClientIDCheck: true,
			Now:               cfg.Clock,
		},
		keys:   keys,
		tokens: tokens,
	}
}

// Kind implements Authenticator.
func (*OIDC) Kind() string { return KindOIDC }

// Authenticate implements Authenticator.
func (o *OIDC) Authenticate(ctx context.Context) (*Caller, error) {
	// An OIDC token is not a cluster's: the claimed cluster is not recorded.
	return authenticateBearer(ctx, func(ctx context.Context, token, _ string) (*Caller, error) {
		return o.verifyCached(ctx, token)
	})
}

// verify checks token and returns the caller it names.
func (o *OIDC) verify(ctx context.Context, token string) (*Caller, error) {
	if len(token) > MaxTokenSize {
		return nil, fmt.Errorf("verify oidc token: %d bytes, limit %d: %w", len(token), MaxTokenSize, ErrTokenTooLarge)
	}
	if o.cfgErr != nil {
		return nil, fmt.Errorf("verify oidc token: %w", o.cfgErr)
	}
	keys := &keySetError{KeySet: o.keys}
	idt, err := oidc.NewVerifier(o.cfg.Rule.Issuer, keys, o.verifyCfg).Verify(ctx, token)
	switch {
	case errors.Is(keys.err, keyfetch.ErrNoKeys):
		return nil, fmt.Errorf("verify oidc token: %w: %w", ErrUnavailable, keys.err)
	case keys.err != nil:
		return nil, fmt.Errorf("verify oidc token: %w: %w", ErrInvalidToken, keys.err)
	case err != nil:
		return nil, fmt.Errorf("verify oidc token: %w: %w", ErrInvalidToken, err)
	}
	if idt.Expiry.IsZero() {
		return nil, fmt.Errorf("verify oidc token: no exp claim: %w", ErrInvalidToken)
	}
	if !intersects(idt.Audience, o.cfg.Rule.Audiences) {
		return nil, fmt.Errorf("verify oidc token: audiences %q, want one of %q: %w", idt.Audience, o.cfg.Rule.Audiences, ErrInvalidToken)
	}
	id, sa, err := identityFromUsername(o.cfg.TrustDomain, idt.Subject)
	if err != nil {
		return nil, fmt.Errorf("verify oidc token: sub: %w", err)
	}
	var claims kubernetesClaims
	if err := idt.Claims(&claims); err != nil {
		return nil, fmt.Errorf("verify oidc token: claims: %w: %w", ErrInvalidToken, err)
	}
	pod, err := claims.check(sa)
	if err != nil {
		return nil, fmt.Errorf("verify oidc token: %w", err)
	}
	return &Caller{Identities: []spiffeid.ID{id}, Authenticator: KindOIDC, Pod: pod}, nil
}

// keySetError keeps the error of the key set it wraps, which the verifier
// flattens into text: whether keys were unavailable or did not match
// decides the refusal's kind.
type keySetError struct {
	oidc.KeySet
	err error
}

func (k *keySetError) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	payload, err := k.KeySet.VerifySignature(ctx, token)
	k.err = err
	return payload, err
}

// kubernetesClaims is the "kubernetes.io" claim of Kubernetes-issued tokens.
type kubernetesClaims struct {
	Kubernetes *kubernetesInfo `json:"kubernetes.io"`
}

type kubernetesInfo struct {
	Namespace      string     `json:"namespace"`
	ServiceAccount *nameAndID `json:"serviceaccount"`
	Pod            *nameAndID `json:"pod"`
}

type nameAndID struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// check refuses Kubernetes claims that contradict sub and returns the pod
// the token is bound to, if any.
func (c kubernetesClaims) check(sa serviceAccount) (*Pod, error) {
	k := c.Kubernetes
	if k == nil {
		return nil, nil
	}
	if k.Namespace != "" && k.Namespace != sa.Namespace {
		return nil, fmt.Errorf("kubernetes.io namespace %q contradicts sub: %w", k.Namespace, ErrInvalidIdentity)
	}
	if k.ServiceAccount != nil && k.ServiceAccount.Name != "" && k.ServiceAccount.Name != sa.Name {
		return nil, fmt.Errorf("kubernetes.io service account %q contradicts sub: %w", k.ServiceAccount.Name, ErrInvalidIdentity)
	}
	if k.Pod == nil || (k.Pod.Name == "" && k.Pod.UID == "") {
		return nil, nil
	}
	return &Pod{Name: k.Pod.Name, UID: k.Pod.UID}, nil
}
