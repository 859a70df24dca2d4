package keyfetch

import (
	"context"
	"encoding/json"
	"fmt"

	jose "github.com/go-jose/go-jose/v4"
)

// RejectAllJWKS is the key set given in place of one that cannot be
// fetched or holds no usable key: a set without keys. Envoy's jwt_authn
// accepts the configuration (an inline key set it cannot parse is logged
// and leaves the provider without keys, jwks_cache.cc) and refuses every
// token of the issuer with 401 (JwksNoValidKeys, authenticator.cc). It is
// never a key: Istio's fallback, a public key whose private half was said
// to be discarded, is trust in a key nobody can audit.
const RejectAllJWKS = `{"keys":[]}`

// JWKSSource is where a key set is published: at JWKSURI, or, when that
// is empty, at the jwks_uri of the issuer's OIDC discovery document.
type JWKSSource struct {
	Issuer  string
	JWKSURI string
}

// URL is where a fetch of the key set starts: JWKSURI, or the issuer's
// discovery document. A rule that refuses it refuses the source; the
// jwks_uri a discovery document names is checked when it is read.
func (s JWKSSource) URL() string {
	if s.JWKSURI != "" {
		return s.JWKSURI
	}
	return discoveryURL(s.Issuer)
}

// CheckSource is the rule for where a RequestAuthentication's key set may
// be fetched from, which its admission webhook and its generator share:
// the source's URL must pass r. The jwks_uri a discovery document names is
// checked when the document is read. The error quotes nothing.
func (r URLRule) CheckSource(src JWKSSource) error {
	return r.Check(src.URL())
}

func (s JWKSSource) String() string {
	if s.JWKSURI == "" {
		return s.Issuer + " (discovery)"
	}
	return s.JWKSURI
}

// FetchJWKS fetches the key set of src with every limit of the client,
// every URL passing rule, and returns it as a JSON Web Key Set holding
// only its usable public signing keys (at most MaxKeys; private members,
// symmetric and encryption keys, and unknown fields are dropped), so that
// what an issuer serves reaches proxies only as keys. A set without such
// a key is an error wrapping ErrBadDocument.
func (c *Client) FetchJWKS(ctx context.Context, src JWKSSource, rule URLRule) (string, error) {
	if src.Issuer == "" && src.JWKSURI == "" {
		return "", fmt.Errorf("%w: neither issuer nor jwks_uri", ErrFetch)
	}
	ks := &KeySet{c: c, issuer: src.Issuer, jwksURI: src.JWKSURI, rule: rule}
	keys, _, err := ks.fetchKeys(ctx)
	if err != nil {
		return "", err
	}
	return encodeKeySet(keys)
}

// CheckJWKS checks a key set written in configuration (a
// RequestAuthentication's inline jwks): it must hold at least one usable
// public signing key. The error quotes nothing of doc.
func CheckJWKS(doc string) error {
	_, err := parseKeySet([]byte(doc))
	return err
}

// encodeKeySet writes keys as a JSON Web Key Set, public parts only.
func encodeKeySet(keys []jose.JSONWebKey) (string, error) {
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(keys))}
	for _, k := range keys {
		pub := k.Public()
		if !pub.Valid() {
			return "", fmt.Errorf("key set: %w: a key has no public form", ErrBadDocument)
		}
		// Only what verification needs: no certificates or thumbprints.
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: pub.Key, KeyID: pub.KeyID, Algorithm: pub.Algorithm, Use: pub.Use})
	}
	b, err := json.Marshal(set)
	if err != nil {
		return "", fmt.Errorf("key set: encode: %w", err)
	}
	return string(b), nil
}
