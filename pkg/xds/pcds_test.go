package xds

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/bulwark-mesh/bulwark/pkg/model/modeltest"
)

// fakeBundle is a trust bundle a test changes.
type fakeBundle struct {
	mu   sync.Mutex
	cur  *ca.Bundle
	subs []chan *ca.Bundle
}

func (f *fakeBundle) Current() *ca.Bundle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func (f *fakeBundle) Subscribe() (<-chan *ca.Bundle, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan *ca.Bundle, 1)
	f.subs = append(f.subs, ch)
	return ch, func() {}
}

func (f *fakeBundle) set(roots ...*x509.Certificate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = &ca.Bundle{Version: uint64(len(roots)), Roots: roots}
	for _, ch := range f.subs {
		select {
		case ch <- f.cur:
		default:
		}
	}
}

// proxyConfigRoots reads the roots of a PCDS resource.
func proxyConfigRoots(t *testing.T, resources []*anypb.Any) []string {
	t.Helper()
	if len(resources) != 1 {
		t.Fatalf("%d ProxyConfig resources, want 1", len(resources))
	}
	var pc meshv1alpha1.ProxyConfig
	if err := resources[0].UnmarshalTo(&pc); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, p := range pc.GetCaCertificatesPem() {
		b, rest := pem.Decode([]byte(p))
		if b == nil || len(rest) != 0 {
			t.Fatalf("caCertificatesPem entry is not one PEM certificate: %q", p)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, c.Subject.CommonName)
	}
	return subjects
}

// PCDS serves the trust bundle as pilot-agent asks for it (an unnamed
// ProxyConfig, state of the world and incremental) and pushes every
// change of it; the agent's ACK is recorded like any other.
func TestProxyConfigCarriesTheTrustBundle(t *testing.T) {
	oldRoot := catest.NewRoot(t, catest.WithCommonName("old root"))
	newRoot := catest.NewRoot(t, catest.WithCommonName("new root"))
	tb := &fakeBundle{}
	tb.set(oldRoot.Cert)
	h := newHarness(t, modeltest.Load(t, baseManifests), func(c *Config) { c.TrustBundle = tb })

	st := h.stream(clientID)
	if err := st.Send(&discovery.DiscoveryRequest{Node: testNode("app", "client", nil), TypeUrl: TypeProxyConfig}); err != nil {
		t.Fatal(err)
	}
	first := recv(t, st)
	if got := proxyConfigRoots(t, first.GetResources()); !slices.Equal(got, []string{"old root"}) {
		t.Fatalf("first ProxyConfig roots %v", got)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: TypeProxyConfig, ResponseNonce: first.GetNonce(), VersionInfo: first.GetVersionInfo()}); err != nil {
		t.Fatal(err)
	}

	delta := h.deltaStream(clientID)
	node := testNode("app", "client", nil)
	node.Id = "sidecar~10.0.0.1~app-2.app~app.svc.cluster.local"
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: TypeProxyConfig}); err != nil {
		t.Fatal(err)
	}
	d := recvDelta(t, delta)
	if len(d.GetResources()) != 1 {
		t.Fatalf("incremental ProxyConfig: %d resources", len(d.GetResources()))
	}
	if got := proxyConfigRoots(t, []*anypb.Any{d.GetResources()[0].GetResource()}); !slices.Equal(got, []string{"old root"}) {
		t.Fatalf("incremental ProxyConfig roots %v", got)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: TypeProxyConfig, ResponseNonce: d.GetNonce()}); err != nil {
		t.Fatal(err)
	}

	// A proxy that never asks for the bundle cannot hold a new root.
	silent := h.deltaStream(clientID)
	silentNode := testNode("app", "client", nil)
	silentNode.Id = "sidecar~10.0.0.2~silent-0.app~app.svc.cluster.local"
	if err := silent.Send(&discovery.DeltaDiscoveryRequest{Node: silentNode, TypeUrl: typeCluster}); err != nil {
		t.Fatal(err)
	}
	recvDelta(t, silent)

	// During a rotation both roots are in the bundle: both streams get them.
	tb.set(oldRoot.Cert, newRoot.Cert)
	both := []string{"old root", "new root"}
	pushed := recv(t, st)
	if got := proxyConfigRoots(t, pushed.GetResources()); !slices.Equal(got, both) {
		t.Errorf("pushed ProxyConfig roots %v, want %v", got, both)
	}
	d = recvDelta(t, delta)
	if len(d.GetResources()) != 1 {
		t.Fatalf("pushed incremental ProxyConfig: %d resources", len(d.GetResources()))
	}
	if got := proxyConfigRoots(t, []*anypb.Any{d.GetResources()[0].GetResource()}); !slices.Equal(got, both) {
		t.Errorf("pushed incremental ProxyConfig roots %v, want %v", got, both)
	}

	// Root rotation waits for every proxy until its ACK of a bundle with
	// the new root arrives.
	lacking := func() []string {
		t.Helper()
		return h.srv.ProxiesWithoutRoot(newRoot.Cert)
	}
	if got := lacking(); len(got) != 3 || !slices.Contains(got, "app-2.app") || !slices.Contains(got, "silent-0.app") {
		t.Fatalf("before any ACK of the new bundle: %v", got)
	}
	if got := h.srv.ProxiesWithoutRoot(oldRoot.Cert); !slices.Equal(got, []string{"silent-0.app"}) {
		t.Fatalf("the old root is held by every proxy that asked for the bundle: %v", got)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: TypeProxyConfig, ResponseNonce: pushed.GetNonce(), VersionInfo: pushed.GetVersionInfo()}); err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: TypeProxyConfig, ResponseNonce: d.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ACKs of the new bundle", func() bool { return slices.Equal(lacking(), []string{"silent-0.app"}) })
	var marked []string
	for _, s := range h.srv.Syncz() {
		if s.LacksNewRoot {
			marked = append(marked, s.NodeID)
		}
	}
	if !slices.Equal(marked, []string{silentNode.Id}) {
		t.Errorf("/debug/syncz marks %v as lacking the new root, want only %s", marked, silentNode.Id)
	}

	var acked bool
	for _, p := range h.srv.Proxies() {
		if p.Acked[TypeProxyConfig] == pushed.GetVersionInfo() {
			acked = true
		}
	}
	if !acked {
		t.Errorf("the ACK of the pushed ProxyConfig was not recorded: %+v", h.srv.Proxies())
	}
}
