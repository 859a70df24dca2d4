package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

// fakeBundles hands out one channel the test drives.
type fakeBundles struct{ ch chan *ca.Bundle }

func (f fakeBundles) Subscribe() (<-chan *ca.Bundle, func()) { return f.ch, func() {} }

// countingIssuer signs with a real CA and counts, or fails while failing is set.
type countingIssuer struct {
	ca      *ca.CA
	mu      sync.Mutex
	n       int
	failing bool
}

func (c *countingIssuer) Sign(req ca.SignRequest) (*ca.Issued, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.failing {
		return nil, errors.New("signer unavailable")
	}
	return c.ca.Sign(req)
}

func (c *countingIssuer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func newIssuer(t *testing.T) *countingIssuer {
	t.Helper()
	authority, err := ca.New(ca.Config{
		TrustDomain: spiffeid.RequireTrustDomainFromString("cluster.local"),
		Store:       ca.NewDirStore(t.TempDir()),
		CACertsDir:  t.TempDir() + "/cacerts",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := authority.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &countingIssuer{ca: authority}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServesCertificateForItsNamesAfterFirstBundle(t *testing.T) {
	issuer := newIssuer(t)
	bundles := fakeBundles{ch: make(chan *ca.Bundle, 1)}
	r, err := New(Config{Issuer: issuer, Bundles: bundles, DNSNames: []string{"istiod.istio-system.svc", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetCertificate(&tls.ClientHelloInfo{}); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("before issuance: err = %v, want ErrNoCertificate", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	bundles.ch <- issuer.ca.Current()
	<-r.Ready()

	cert, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.Leaf.VerifyHostname("istiod.istio-system.svc"); err != nil {
		t.Error(err)
	}
	if len(cert.Leaf.URIs) != 0 {
		t.Errorf("serving certificate carries URI SANs %v", cert.Leaf.URIs)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: issuer.ca.Current().Pool(), DNSName: "localhost"}); err != nil {
		t.Errorf("serving certificate does not verify against the bundle: %v", err)
	}
}

func TestRenewsWhenTheBundleChanges(t *testing.T) {
	issuer := newIssuer(t)
	bundles := fakeBundles{ch: make(chan *ca.Bundle)}
	r, _ := New(Config{Issuer: issuer, Bundles: bundles, DNSNames: []string{"localhost"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	bundles.ch <- issuer.ca.Current()
	<-r.Ready()
	first, _ := r.GetCertificate(nil)
	bundles.ch <- issuer.ca.Current()
	eventually(t, "a second certificate", func() bool {
		c, _ := r.GetCertificate(nil)
		return c != first
	})
}

func TestRetriesAfterAFailedIssuance(t *testing.T) {
	issuer := newIssuer(t)
	issuer.failing = true
	bundles := fakeBundles{ch: make(chan *ca.Bundle, 1)}
	r, _ := New(Config{Issuer: issuer, Bundles: bundles, DNSNames: []string{"localhost"}, RetryInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	bundles.ch <- issuer.ca.Current()

	eventually(t, "two attempts", func() bool { return issuer.count() >= 2 })
	issuer.mu.Lock()
	issuer.failing = false
	issuer.mu.Unlock()
	select {
	case <-r.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("no certificate after the issuer recovered")
	}
}

func TestRenewalIsScheduledAtHalfLife(t *testing.T) {
	issuer := newIssuer(t)
	r, _ := New(Config{Issuer: issuer, Bundles: fakeBundles{}, DNSNames: []string{"localhost"}, TTL: 10 * time.Hour})
	wait, err := r.rotate()
	if err != nil {
		t.Fatal(err)
	}
	// Half of 10h, from a NotBefore backdated by a few minutes.
	if wait < 4*time.Hour+50*time.Minute || wait > 5*time.Hour {
		t.Errorf("next renewal in %v, want about 5h", wait)
	}
}
