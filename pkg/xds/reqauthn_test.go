package xds

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/authn/keyfetch"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
	"github.com/bulwark-mesh/bulwark/pkg/xds/resource"
)

// Two P-256 public keys, k1 and k2.
const (
	jwksK1 = `{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`
	jwksK2 = `{"keys":[{"kty":"EC","crv":"P-256","kid":"k2","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`
)

// inboundJWKS returns the key set inlined in web's jwt_authn, "" if none.
func inboundJWKS(t *testing.T, r *discovery.DiscoveryResponse) string {
	t.Helper()
	for _, a := range r.GetResources() {
		l := unmarshal[*listener.Listener](t, a, &listener.Listener{})
		if l.GetName() != "virtualInbound" {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != "envoy.filters.network.http_connection_manager" {
					continue
				}
				m := unmarshal[*hcm.HttpConnectionManager](t, f.GetTypedConfig(), &hcm.HttpConnectionManager{})
				for _, hf := range m.GetHttpFilters() {
					if hf.GetName() == "envoy.filters.http.jwt_authn" {
						cfg := unmarshal[*jwtauthn.JwtAuthentication](t, hf.GetTypedConfig(), &jwtauthn.JwtAuthentication{})
						return cfg.GetProviders()["origins-0"].GetLocalJwks().GetInlineString()
					}
				}
			}
		}
	}
	return ""
}

// TestRequestAuthenticationKeysArePushed: the key set of a
// RequestAuthentication, fetched by istiod from its issuer, reaches a
// connected sidecar inline, and a rotation of the issuer's keys is pushed
// without reconnecting.
func TestRequestAuthenticationKeysArePushed(t *testing.T) {
	var served atomic.Pointer[string]
	k1 := jwksK1
	served.Store(&k1)
	iss := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(*served.Load()))
	}))
	t.Cleanup(iss.Close)
	cache := keyfetch.New(keyfetch.Config{RefreshInterval: 50 * time.Millisecond, RetryInterval: 50 * time.Millisecond, Logger: catest.Logger(t)}).
		JWKSCache(keyfetch.URLRule{LoopbackHTTP: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = cache.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	snap := modeltest.Load(t, envoyManifests+`---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: web}}
  jwtRules: [{issuer: "https://idp.example", jwksUri: "`+iss.URL+`/keys"}]
`)
	h := newHarness(t, snap, func(c *Config) { c.KeySets = cache; c.AllowLoopbackHTTPJWKS = true })
	st := h.stream("spiffe://cluster.local/ns/app/sa/web")
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "web", "10.0.0.20"), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	// Until the first fetch the issuer's tokens are refused; then its keys
	// are pushed.
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := recv(t, st)
			got := inboundJWKS(t, r)
			ack(t, st, r)
			if strings.Contains(got, want) {
				return
			}
			if got != keyfetch.RejectAllJWKS && !strings.Contains(got, `"kid":"k`) {
				t.Fatalf("inline key set %q is neither the issuer's nor RejectAllJWKS", got)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no listener with %s; last %q", want, got)
			}
		}
	}
	waitFor(`"kid":"k1"`)
	k2 := jwksK2
	served.Store(&k2)
	waitFor(`"kid":"k2"`)
}

// TestRequestAuthenticationChangeIsPushed: a RequestAuthentication added
// to the model reaches the connected sidecar it selects, and its removal
// takes jwt_authn away again.
func TestRequestAuthenticationChangeIsPushed(t *testing.T) {
	h := newHarness(t, modeltest.Load(t, envoyManifests), nil)
	st := h.stream("spiffe://cluster.local/ns/app/sa/web")
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "web", "10.0.0.20"), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, st)
	if got := inboundJWKS(t, r); got != "" {
		t.Fatalf("jwt_authn before any RequestAuthentication: %q", got)
	}
	ack(t, st, r)
	h.store.Publish(modeltest.Load(t, envoyManifests+`---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  jwtRules: [{issuer: "https://idp.example", jwks: '`+jwksK1+`'}]
`))
	r = recv(t, st)
	if got := inboundJWKS(t, r); got != jwksK1 {
		t.Fatalf("after adding the RequestAuthentication: key set %q, want the rule's inline one", got)
	}
	ack(t, st, r)
	h.store.Publish(modeltest.Load(t, envoyManifests))
	if got := inboundJWKS(t, recv(t, st)); got != "" {
		t.Fatalf("after removing the RequestAuthentication: jwt_authn with %q", got)
	}
}

// wantRecorder is a key set cache that tells of every Want.
type wantRecorder struct {
	*keyfetch.JWKSCache
	wants chan []keyfetch.JWKSSource
}

func (w wantRecorder) Want(srcs []keyfetch.JWKSSource) {
	w.wants <- srcs
	w.JWKSCache.Want(srcs)
}

// TestLoopbackHTTPRequestAuthenticationFailsClosed: unless istiod's
// operator allows it, a RequestAuthentication whose key set would be
// fetched over plain http from a loopback port (istiod's own, say) is
// not fetched: its issuer's tokens are refused, and the rule is reported
// as not enforced as written.
func TestLoopbackHTTPRequestAuthenticationFailsClosed(t *testing.T) {
	var asked atomic.Int32
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(jwksK1))
	}))
	t.Cleanup(local.Close)
	rec, log := logtest.New(t)
	cache := wantRecorder{
		JWKSCache: keyfetch.New(keyfetch.Config{Logger: log}).JWKSCache(keyfetch.URLRule{}),
		wants:     make(chan []keyfetch.JWKSSource, 16),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = cache.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	snap := modeltest.Load(t, envoyManifests+`---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: app}
spec:
  selector: {matchLabels: {app: web}}
  jwtRules: [{issuer: "https://idp.example", jwksUri: "`+local.URL+`/keys"}]
`)
	h := newHarness(t, snap, func(c *Config) { c.KeySets = cache; c.Logger = log })
	st := h.stream("spiffe://cluster.local/ns/app/sa/web")
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode("app", "web", "10.0.0.20"), TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	if got := inboundJWKS(t, recv(t, st)); got != keyfetch.RejectAllJWKS {
		t.Errorf("inline key set %q, want RejectAllJWKS", got)
	}
	select {
	case srcs := <-cache.wants:
		if len(srcs) != 0 {
			t.Errorf("key sets wanted %v, want none", srcs)
		}
	case <-time.After(10 * time.Second): // a guard, not a measure
		t.Fatal("the key sets wanted were never said")
	}
	if n := rec.Count("request authentication not enforced as written", "--allow-loopback-http-jwks"); n != 1 {
		t.Errorf("%d lines report the rule as not enforced, want 1", n)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the loopback port was asked %d times", n)
	}
}
