package authn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
)

// ErrInvalidJWTRule: a JWT rule is malformed or unsafe.
var ErrInvalidJWTRule = errors.New("invalid JWT rule")

// JWTRule says which third-party JWTs istiod accepts, in the JSON form of
// Istio's JWT_RULE setting:
//
//	{"issuer":"https://issuer.example","jwks_uri":"https://issuer.example/keys","audiences":["istio-ca"]}
type JWTRule struct {
	// Issuer must equal the tokens' iss claim. When JWKSURI is empty, keys
	// are found by OIDC discovery at Issuer.
	Issuer string `json:"issuer"`
	// JWKSURI is where the issuer's signing keys are published. Optional.
	JWKSURI string `json:"jwks_uri,omitempty"`
	// Audiences lists the aud values accepted; a token needs one of them.
	Audiences []string `json:"audiences"`
}

// ParseJWTRule parses and validates a JWT rule. Unknown fields are refused.
func ParseJWTRule(s string) (JWTRule, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var r JWTRule
	if err := dec.Decode(&r); err != nil {
		return JWTRule{}, fmt.Errorf("parse jwt rule: %w: %w", ErrInvalidJWTRule, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return JWTRule{}, fmt.Errorf("parse jwt rule: data after the rule object: %w", ErrInvalidJWTRule)
	}
	if err := r.Validate(); err != nil {
		return JWTRule{}, fmt.Errorf("parse jwt rule: %w", err)
	}
	return r, nil
}

// Validate checks that the issuer and JWKS URI are https (http only on a
// loopback host) and that at least one audience is named.
func (r JWTRule) Validate() error {
	if r.Issuer == "" {
		return fmt.Errorf("no issuer: %w", ErrInvalidJWTRule)
	}
	if err := checkRuleURL(r.Issuer); err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	if r.JWKSURI != "" {
		if err := checkRuleURL(r.JWKSURI); err != nil {
			return fmt.Errorf("jwks_uri: %w", err)
		}
	}
	if len(r.Audiences) == 0 {
		return fmt.Errorf("no audiences: %w", ErrInvalidJWTRule)
	}
	for i, a := range r.Audiences {
		if a == "" {
			return fmt.Errorf("audience %d is empty: %w", i, ErrInvalidJWTRule)
		}
	}
	return nil
}

// checkRuleURL applies keyfetch's URL rule to a configured URL.
func checkRuleURL(raw string) error {
	if err := keyfetch.CheckURL(raw); err != nil {
		return fmt.Errorf("%q: %w: %w", raw, ErrInvalidJWTRule, err)
	}
	return nil
}
