package keyfetch

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

var (
	t0   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	algs = []string{string(jose.ES256), string(jose.RS256)}
)

// secret stands for what a metadata service would answer: no error and no
// log line may ever hold it.
const secret = "AKIAIOSFODNN7EXAMPLE-wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"

// serveOn serves h over plain HTTP on ip, a loopback address, and counts
// the connections made to it.
func serveOn(t *testing.T, ip string, h http.Handler) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	conns := new(atomic.Int32)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// metadataStandIn is a server on 127.0.0.1 that tests refuse as they would
// the metadata address (with ::1, so that "localhost" resolves only to
// refused addresses), so that any attempt to reach it is seen: it counts
// connections and answers h, or the secret.
type metadataStandIn struct {
	URL      string // http://127.0.0.1:PORT
	Port     string
	prefixes []netip.Prefix
	conns    *atomic.Int32
}

func newMetadataStandIn(t *testing.T, h http.Handler) *metadataStandIn {
	t.Helper()
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeBody(w, "application/json", []byte(`{"keys":[],"AccessKeyId":"`+secret+`"}`))
		})
	}
	srv, conns := serveOn(t, "127.0.0.1", h)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return &metadataStandIn{
		URL: srv.URL, Port: port, conns: conns,
		prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")},
	}
}

// testClient is a client whose guard also refuses the stand-in's address,
// logging to a recorder.
func testClient(t *testing.T, cfg Config, standIn *metadataStandIn) (*Client, *logtest.Recorder, *catest.Clock) {
	t.Helper()
	rec, log := logtest.New(t)
	clock := catest.NewClock(t0)
	cfg.Logger, cfg.Clock = log, clock.Now
	cfg.setDefaults()
	refused := append([]netip.Prefix{}, refusedPrefixes...)
	if standIn != nil {
		refused = append(refused, standIn.prefixes...)
	}
	return newClient(cfg, addressGuard{refused: refused, allowed: cfg.AllowedPrefixes}), rec, clock
}

// signer signs tokens with one ES256 key under kid.
type signer struct {
	kid string
	key *ecdsa.PrivateKey
}

func newSigner(t testing.TB, kid string) signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, key: key}
}

func (s signer) jwk() jose.JSONWebKey {
	return jose.JSONWebKey{Key: &s.key.PublicKey, KeyID: s.kid, Algorithm: string(jose.ES256), Use: "sig"}
}

// token signs payload.
func (s signer) token(t testing.TB, payload string) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: s.key, KeyID: s.kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := sig.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// keySetJSON is the JSON Web Key Set of signers.
func keySetJSON(t testing.TB, signers ...signer) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{}
	for _, s := range signers {
		set.Keys = append(set.Keys, s.jwk())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeBody(w http.ResponseWriter, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	_, _ = w.Write(body)
}
