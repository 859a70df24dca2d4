package keyfetch

import (
	"errors"
	"strings"
	"testing"
)

const fuzzIssuer = "https://issuer.example"

// FuzzDiscovery feeds arbitrary discovery documents to the parser: a
// jwks_uri it returns passes the URL rule it was given, and its errors
// quote nothing of the document.
func FuzzDiscovery(f *testing.F) {
	for _, s := range []string{
		`{"issuer":"https://issuer.example","jwks_uri":"https://issuer.example/keys"}`,
		`{"issuer":"https://issuer.example","jwks_uri":"http://169.254.169.254/latest/meta-data/"}`,
		`{"issuer":"https://issuer.example","jwks_uri":"https://u:p@issuer.example/"}`,
		`{"issuer":"https://issuer.example","jwks_uri":"http://127.0.0.1:15014/debug/configz"}`,
		`{"issuer":"https://evil.example","jwks_uri":"https://issuer.example/keys"}`,
		`{"issuer":"https://issuer.example"}`, `{"issuer":1}`, `[]`, `{} {}`, `<html>`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, rule := range []URLRule{{}, {LoopbackHTTP: true}} {
			uri, err := parseDiscovery(body, fuzzIssuer, rule)
			if err != nil {
				if !errors.Is(err, ErrBadDocument) {
					t.Fatalf("error of unknown kind: %v", err)
				}
				checkQuotesNothing(t, err, body)
				continue
			}
			if err := rule.Check(uri); err != nil {
				t.Fatalf("returned jwks_uri %q that the URL rule %+v refuses: %v", uri, rule, err)
			}
		}
	})
}

// FuzzKeySet feeds arbitrary key sets to the parser: what it keeps is at
// most MaxKeys valid public signing keys, and its errors quote nothing of
// the document.
func FuzzKeySet(f *testing.F) {
	f.Add(keySetJSON(f, newSigner(f, "a"), newSigner(f, "b")))
	for _, s := range []string{
		`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
		`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","use":"enc"}]}`,
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		`{"keys":"x"}`, `{"keys":[1,null,{}]}`, `{}`, `null`, `{"keys":[]} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := parseKeySet(body)
		if err != nil {
			if !errors.Is(err, ErrBadDocument) {
				t.Fatalf("error of unknown kind: %v", err)
			}
			checkQuotesNothing(t, err, body)
			return
		}
		if len(keys) == 0 || len(keys) > MaxKeys {
			t.Fatalf("kept %d keys", len(keys))
		}
		for _, k := range keys {
			if !k.IsPublic() || !k.Valid() {
				t.Fatalf("kept key %+v, not a valid public key", k)
			}
			if _, symmetric := k.Key.([]byte); symmetric {
				t.Fatal("kept a symmetric key")
			}
		}
	})
}

// checkQuotesNothing fails when err holds a run of 12 bytes of body that is
// not in the messages the parsers write themselves.
func checkQuotesNothing(t *testing.T, err error, body []byte) {
	t.Helper()
	msg := err.Error()
	const run = 12
	for i := 0; i+run <= len(body); i++ {
		part := string(body[i : i+run])
		if strings.Contains(msg, part) && !strings.Contains(ownMessages, part) {
			t.Fatalf("error %q quotes the document: %q", msg, part)
		}
	}
}

// ownMessages are the parsers' own words, which a document may happen to
// contain.
const ownMessages = "discovery document names another issuer has no jwks_uri's jwks_uri: " +
	"bad key material document key set of entries has no usable public signing key " +
	"malformed JSON at byte not the expected JSON object data after the JSON object " +
	"must be scheme://host[:port][/path] only http is allowed only for loopback hosts " +
	"scheme is not https refused url not a URL bytes, limit 2048 port is not 1-65535 " +
	"http to a loopback host is not allowed by this istiod (--allow-loopback-http-jwks)"

// FuzzJWKSForProxies feeds arbitrary key sets to what RequestAuthentication
// passes on to proxies: what is kept encodes to a key set of the same
// public keys, with no private or symmetric member, that CheckJWKS accepts.
func FuzzJWKSForProxies(f *testing.F) {
	f.Add(keySetJSON(f, newSigner(f, "a"), newSigner(f, "b")))
	for _, s := range []string{
		`{"keys":[{"kty":"oct","k":"c2VjcmV0"},{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","x5t":"AAAA"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0","d":"jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := parseKeySet(body)
		if err != nil {
			return
		}
		doc, err := encodeKeySet(keys)
		if err != nil {
			t.Fatalf("kept keys do not encode: %v", err)
		}
		if err := CheckJWKS(doc); err != nil {
			t.Fatalf("encoded key set refused: %v", err)
		}
		again, _ := parseKeySet([]byte(doc))
		if len(again) != len(keys) {
			t.Fatalf("%d keys encoded to %d", len(keys), len(again))
		}
		for _, bad := range []string{`"d":`, `"k":`, `"p":`, `"x5c":`, `"oct"`} {
			if strings.Contains(doc, bad) {
				t.Fatalf("encoded key set holds %s: %s", bad, doc)
			}
		}
	})
}
