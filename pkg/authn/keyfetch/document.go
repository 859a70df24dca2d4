package keyfetch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	jose "github.com/go-jose/go-jose/v4"
)

// ErrBadDocument: a fetched discovery document or key set is malformed or
// names something it may not.
var ErrBadDocument = errors.New("bad key material document")

// MaxKeys bounds the keys kept from one key set.
const MaxKeys = 100

// parseDiscovery returns the jwks_uri of an OpenID Provider Metadata
// document published for issuer. The document must name issuer exactly,
// and its jwks_uri must pass rule. Errors quote nothing of the document.
func parseDiscovery(body []byte, issuer string, rule URLRule) (string, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := decodeObject(body, &doc); err != nil {
		return "", fmt.Errorf("discovery document: %w", err)
	}
	if doc.Issuer != issuer {
		return "", fmt.Errorf("discovery document names another issuer: %w", ErrBadDocument)
	}
	if doc.JWKSURI == "" {
		return "", fmt.Errorf("discovery document has no jwks_uri: %w", ErrBadDocument)
	}
	if err := rule.Check(doc.JWKSURI); err != nil {
		return "", fmt.Errorf("discovery document's jwks_uri: %w: %w", ErrBadDocument, err)
	}
	return doc.JWKSURI, nil
}

// parseKeySet returns the public signing keys of a JSON Web Key Set: keys
// that are malformed, private, symmetric or for encryption are skipped, and
// a set left with no key is an error.
func parseKeySet(body []byte) ([]jose.JSONWebKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := decodeObject(body, &set); err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		if len(keys) == MaxKeys {
			break
		}
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			continue
		}
		if !usableSigningKey(k) {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("key set of %d entries has no usable public signing key: %w", len(set.Keys), ErrBadDocument)
	}
	return keys, nil
}

// usableSigningKey accepts valid public RSA, ECDSA and Ed25519 keys not
// reserved for encryption.
func usableSigningKey(k jose.JSONWebKey) bool {
	if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
		return false
	}
	switch k.Key.(type) {
	case []byte:
		return false
	default:
		return true
	}
}

// decodeObject decodes one JSON object into v. Its errors say where the
// document is malformed, not what it holds: encoding/json's own errors may
// quote it.
func decodeObject(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Errorf("malformed JSON at byte %d: %w", syn.Offset, ErrBadDocument)
		}
		return fmt.Errorf("not the expected JSON object: %w", ErrBadDocument)
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON object: %w", ErrBadDocument)
	}
	return nil
}
