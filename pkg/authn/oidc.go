package authn

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// signingAlgs are the algorithms accepted on OIDC tokens: asymmetric only,
// so that neither "none" nor an HMAC keyed with a public key can pass.
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
}

// defaultOIDCHTTPTimeout bounds discovery and JWKS requests made with the
// default HTTP client.
const defaultOIDCHTTPTimeout = 10 * time.Second

// OIDCConfig configures an OIDC authenticator.
type OIDCConfig struct {
	// TrustDomain is the trust domain of the identities granted.
	TrustDomain spiffeid.TrustDomain
	// Rule names the issuer, its keys and the accepted audiences.
	Rule JWTRule
	// HTTPClient fetches the discovery document and the JWKS. Default: a
	// client with a 10s timeout.
	HTTPClient *http.Client
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

	// verifier is set once keys can be found: at construction when the rule
	// names a JWKS URI, after the first successful discovery otherwise.
	verifier atomic.Pointer[oidc.IDTokenVerifier]
	// discovering holds one token while a discovery runs.
	discovering chan struct{}
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
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: defaultOIDCHTTPTimeout}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultOIDCCacheSize
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultOIDCCacheTTL
	}
	cfg.Rule.Audiences = slices.Clone(cfg.Rule.Audiences)
	o := &OIDC{
		cfg:    cfg,
		cfgErr: cfg.Rule.Validate(),
		verifyCfg: &oidc.Config{
			SupportedSigningAlgs: signingAlgs,
			// The audience is checked against every accepted value below.
			SkipClientIDCheck: true,
			Now:               cfg.Clock,
		},
		discovering: make(chan struct{}, 1),
		tokens:      newVerifiedTokens(cfg.CacheSize, cfg.CacheTTL),
	}
	if keys == nil && cfg.Rule.JWKSURI != "" {
		keys = oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), cfg.HTTPClient), cfg.Rule.JWKSURI)
	}
	if keys != nil {
		o.verifier.Store(oidc.NewVerifier(cfg.Rule.Issuer, keys, o.verifyCfg))
	}
	return o
}

// Kind implements Authenticator.
func (*OIDC) Kind() string { return KindOIDC }

// Authenticate implements Authenticator.
func (o *OIDC) Authenticate(ctx context.Context) (*Caller, error) {
	return authenticateBearer(ctx, o.verifyCached)
}

// verify checks token and returns the caller it names.
func (o *OIDC) verify(ctx context.Context, token string) (*Caller, error) {
	if len(token) > MaxTokenSize {
		return nil, fmt.Errorf("verify oidc token: %d bytes, limit %d: %w", len(token), MaxTokenSize, ErrTokenTooLarge)
	}
	if o.cfgErr != nil {
		return nil, fmt.Errorf("verify oidc token: %w", o.cfgErr)
	}
	v, err := o.getVerifier(ctx)
	if err != nil {
		return nil, err
	}
	idt, err := v.Verify(ctx, token)
	if err != nil {
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

// getVerifier returns the verifier, discovering the issuer first if that
// has not yet succeeded. One discovery runs at a time; a failed one is
// retried by the next request.
func (o *OIDC) getVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	if v := o.verifier.Load(); v != nil {
		return v, nil
	}
	select {
	case o.discovering <- struct{}{}:
		defer func() { <-o.discovering }()
	case <-ctx.Done():
		return nil, fmt.Errorf("discover oidc issuer: %w: %w", ErrUnavailable, ctx.Err())
	}
	if v := o.verifier.Load(); v != nil {
		return v, nil
	}
	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, o.cfg.HTTPClient), o.cfg.Rule.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover oidc issuer %s: %w: %w", o.cfg.Rule.Issuer, ErrUnavailable, err)
	}
	v := provider.Verifier(o.verifyCfg)
	o.verifier.Store(v)
	o.keySetChanged()
	return v, nil
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
