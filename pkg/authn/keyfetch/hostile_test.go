package keyfetch

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostileCase is an issuer's hostile answer and how a fetch must fail.
type hostileCase struct {
	// discovery answers the discovery document; nil: the rule names
	// the key set at /keys.
	discovery func(w http.ResponseWriter, r *http.Request, iss, standIn string)
	// keys answers /keys and any other path.
	keys    func(w http.ResponseWriter, r *http.Request, standIn string)
	timeout time.Duration
	want    error
	// wantText is in the error.
	wantText string
}

// hostileCases are the hostile issuers every path fetching key material
// is tested against: the CSR path's key sets and RequestAuthentication's.
func hostileCases() map[string]hostileCase {
	const tenMiB = 10 << 20
	bigBody := []byte(`{"keys":[` + strings.Repeat(`"`+secret+`",`, tenMiB/(len(secret)+3)) + `""]}`)
	return map[string]hostileCase{
		"a discovery document naming the metadata service over http is refused by the URL rule": {
			discovery: discovery("http://169.254.169.254/latest/meta-data/iam/security-credentials/"),
			want:      ErrRefusedURL,
		},
		"a discovery document naming the metadata service over https is refused at dial": {
			discovery: discovery("https://169.254.169.254/latest/meta-data/iam/security-credentials/"),
			want:      ErrRefusedAddress,
		},
		"a discovery document naming the IPv6 metadata service is refused at dial": {
			discovery: discovery("https://[fd00:ec2::254]/latest/meta-data/"),
			want:      ErrRefusedAddress,
		},
		"a discovery document naming a refused loopback address is refused at dial": {
			discovery: func(w http.ResponseWriter, r *http.Request, iss, standIn string) {
				discovery(standIn+"/latest/meta-data/")(w, r, iss, standIn)
			},
			want: ErrRefusedAddress,
		},
		"a discovery document naming a host name that resolves to refused addresses is refused at dial": {
			discovery: func(w http.ResponseWriter, r *http.Request, iss, standIn string) {
				discovery(strings.Replace(standIn, "127.0.0.1", "localhost", 1)+"/latest/meta-data/")(w, r, iss, standIn)
			},
			want: ErrRefusedAddress,
		},
		"a discovery document naming a jwks_uri with user info is refused": {
			discovery: discovery("https://user:" + secret + "@issuer.example/keys"),
			want:      ErrRefusedURL,
		},
		"a discovery document of another issuer is refused": {
			discovery: func(w http.ResponseWriter, _ *http.Request, _, _ string) {
				writeBody(w, "application/json", []byte(`{"issuer":"`+secret+`","jwks_uri":"https://issuer.example/keys"}`))
			},
			want: ErrBadDocument,
		},
		"a discovery document that is an HTML page is refused": {
			discovery: func(w http.ResponseWriter, _ *http.Request, _, _ string) {
				writeBody(w, "text/html; charset=utf-8", []byte("<html>"+secret+"</html>"))
			},
			want:     ErrFetch,
			wantText: "content type",
		},
		"a key set answering 302 to the metadata service is not followed": {
			keys: func(w http.ResponseWriter, r *http.Request, _ string) {
				http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/security-credentials/", http.StatusFound)
			},
			want: errCrossOriginRedirect,
		},
		"a key set answering 302 to a refused loopback address is not followed": {
			keys: func(w http.ResponseWriter, r *http.Request, standIn string) {
				http.Redirect(w, r, standIn+"/latest/meta-data/", http.StatusFound)
			},
			want: errCrossOriginRedirect,
		},
		"a redirect chain within the issuer that leaves it at the end is not followed": {
			keys: func(w http.ResponseWriter, r *http.Request, standIn string) {
				switch r.URL.Path {
				case "/keys":
					http.Redirect(w, r, "/a", http.StatusMovedPermanently)
				case "/a":
					http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
				default:
					http.Redirect(w, r, standIn+"/", http.StatusFound)
				}
			},
			want: errCrossOriginRedirect,
		},
		"a redirect loop within the issuer is cut short": {
			keys: func(w http.ResponseWriter, r *http.Request, _ string) {
				http.Redirect(w, r, "/keys", http.StatusFound)
			},
			want:     ErrFetch,
			wantText: "redirects",
		},
		"a 10 MiB key set with its length announced is refused": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
				writeBody(w, "application/json", bigBody)
			},
			want:     ErrFetch,
			wantText: "limit",
		},
		"a 10 MiB key set streamed without a length is refused": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				w.Header().Set("Content-Type", "application/json")
				for i := 0; i < len(bigBody); i += 64 << 10 {
					_, _ = w.Write(bigBody[i:min(i+64<<10, len(bigBody))])
					w.(http.Flusher).Flush()
				}
			},
			want:     ErrFetch,
			wantText: "body over",
		},
		"a key set that trickles in is cut off by the timeout": {
			keys: func(w http.ResponseWriter, r *http.Request, _ string) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"keys":[`))
				for {
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(10 * time.Millisecond):
						_, _ = w.Write([]byte(" "))
					}
				}
			},
			timeout: 200 * time.Millisecond,
			want:    ErrFetch,
		},
		"a key set served as an HTML page is refused": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				writeBody(w, "text/html", []byte("<html><body>"+secret+"</body></html>"))
			},
			want:     ErrFetch,
			wantText: "content type",
		},
		"a key set served as text/plain is refused": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				writeBody(w, "text/plain", []byte(`{"keys":[],"x":"`+secret+`"}`))
			},
			want:     ErrFetch,
			wantText: "content type",
		},
		"a key set without a content type is refused": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				w.Header()["Content-Type"] = nil // no sniffing either
				_, _ = w.Write([]byte(`{"keys":[],"x":"` + secret + `"}`))
			},
			want:     ErrFetch,
			wantText: "content type",
		},
		"an error status with the secret in its body is refused": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				http.Error(w, secret, http.StatusInternalServerError)
			},
			want:     ErrFetch,
			wantText: "status 500",
		},
		"a key set that is not JSON is refused without quoting it": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				writeBody(w, "application/json", []byte(`{"keys": `+secret+`}`))
			},
			want:     ErrBadDocument,
			wantText: "malformed JSON at byte",
		},
		"a key set of the wrong shape is refused without quoting it": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				writeBody(w, "application/json", []byte(`{"keys": "`+secret+`"}`))
			},
			want: ErrBadDocument,
		},
		"a key set of symmetric and malformed keys only is refused": {
			keys: func(w http.ResponseWriter, _ *http.Request, _ string) {
				writeBody(w, "application/jwk-set+json", []byte(`{"keys":[{"kty":"oct","kid":"k1","k":"`+secret+`"},{"kty":"`+secret+`"}]}`))
			},
			want: ErrBadDocument,
		},
	}
}

// TestHostileIssuer serves, on loopback, an issuer that tries to make istiod
// fetch from a refused address or copy what it fetched into its errors and
// log. Every case must fail closed, reach no refused address and leak nothing.
func TestHostileIssuer(t *testing.T) {
	tests := hostileCases()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			standIn := newMetadataStandIn(t, nil)
			issURL, jwksURI := serveHostile(t, tc, standIn)
			c, rec, _ := testClient(t, Config{Timeout: tc.timeout}, standIn)
			token := newSigner(t, "k1").token(t, `{"sub":"x"}`)

			_, err := c.KeySet(issURL, jwksURI, algs).VerifySignature(context.Background(), token)
			if !errors.Is(err, ErrNoKeys) || !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v and %v", err, ErrNoKeys, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error = %v, want it to say %q", err, tc.wantText)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), secret[:16]) {
				t.Errorf("the error holds the fetched secret: %v", err)
			}
			if n := rec.Count("fetching the issuer's keys failed"); n != 1 {
				t.Errorf("%d failure lines logged, want 1", n)
			}
			if n := rec.Count(secret[:16]); n != 0 {
				t.Errorf("%d log lines hold the fetched secret", n)
			}
			if n := standIn.conns.Load(); n != 0 {
				t.Errorf("%d connections reached the refused address", n)
			}
		})
	}
}

// serveHostile serves tc's issuer on 127.0.0.2 and returns its URL and
// the jwks_uri to configure ("" when the case answers discovery).
func serveHostile(t *testing.T, tc hostileCase, standIn *metadataStandIn) (issURL, jwksURI string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		tc.discovery(w, r, issURL, standIn.URL)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if tc.keys == nil {
			http.NotFound(w, r)
			return
		}
		tc.keys(w, r, standIn.URL)
	})
	srv, _ := serveOn(t, "127.0.0.2", mux)
	issURL = srv.URL
	if tc.discovery == nil {
		jwksURI = srv.URL + "/keys"
	}
	return issURL, jwksURI
}

// discovery answers a discovery document for the issuer naming jwksURI.
func discovery(jwksURI string) func(w http.ResponseWriter, r *http.Request, iss, standIn string) {
	return func(w http.ResponseWriter, _ *http.Request, iss, _ string) {
		writeBody(w, "application/json", []byte(`{"issuer":"`+iss+`","jwks_uri":"`+jwksURI+`"}`))
	}
}
