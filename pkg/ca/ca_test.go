package ca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

func TestNewChecksTheConfig(t *testing.T) {
	tests := map[string]struct {
		change func(*Config)
		ok     bool
	}{
		"defaults are enough":                {change: func(*Config) {}, ok: true},
		"a trust domain is required":         {change: func(c *Config) { c.TrustDomain = spiffeid.TrustDomain{} }},
		"a store is required":                {change: func(c *Config) { c.Store = nil }},
		"an unknown key type is refused":     {change: func(c *Config) { c.KeyType = "dsa-1024" }},
		"a negative max ttl is refused":      {change: func(c *Config) { c.MaxTTL = -time.Second }},
		"a default above the max is refused": {change: func(c *Config) { c.DefaultTTL, c.MaxTTL = 2*time.Hour, time.Hour }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := Config{TrustDomain: testTD, Store: NewDirStore(t.TempDir())}
			tc.change(&cfg)
			_, err := New(cfg)
			if (err == nil) != tc.ok {
				t.Errorf("New = %v; want ok %t", err, tc.ok)
			}
		})
	}
}

func TestParseKeyType(t *testing.T) {
	tests := map[string]struct {
		in   string
		want KeyType
		ok   bool
	}{
		"empty means the default":        {in: "", want: KeyTypeECDSAP256, ok: true},
		"names are case-insensitive":     {in: "RSA-3072", want: KeyTypeRSA3072, ok: true},
		"ecdsa-p384 is known":            {in: "ecdsa-p384", want: KeyTypeECDSAP384, ok: true},
		"an unknown name is refused":     {in: "ed25519"},
		"an unsupported size is refused": {in: "rsa-1024"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseKeyType(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseKeyType(%q) = %q, %v; want %q, ok %t", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestGenerateKey(t *testing.T) {
	for name, tc := range map[string]struct {
		kt   KeyType
		want func(any) bool
	}{
		"ecdsa-p256 makes a P-256 key":  {KeyTypeECDSAP256, func(k any) bool { return k.(*ecdsa.PrivateKey).Curve == elliptic.P256() }},
		"ecdsa-p384 makes a P-384 key":  {KeyTypeECDSAP384, func(k any) bool { return k.(*ecdsa.PrivateKey).Curve == elliptic.P384() }},
		"rsa-2048 makes a 2048-bit key": {KeyTypeRSA2048, func(k any) bool { return k.(*rsa.PrivateKey).N.BitLen() == 2048 }},
	} {
		t.Run(name, func(t *testing.T) {
			k, err := GenerateKey(tc.kt)
			if err != nil || !tc.want(k) {
				t.Errorf("GenerateKey(%s) = %T, %v", tc.kt, k, err)
			}
		})
	}
	if _, err := GenerateKey("nope"); err == nil {
		t.Error("GenerateKey of an unknown type succeeded")
	}
}

func TestSelfSignedRoot(t *testing.T) {
	store := NewDirStore(t.TempDir())
	c, _ := fakeClockCA(t, func(cfg *Config) { cfg.Store = store; cfg.KeyType = KeyTypeECDSAP384 })
	root := c.SigningCert()
	if !root.IsCA || !root.BasicConstraintsValid || root.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("root IsCA %t, constraints %t, usage %b", root.IsCA, root.BasicConstraintsValid, root.KeyUsage)
	}
	critical := false
	for _, e := range root.Extensions {
		if e.Id.Equal(oidKeyUsage) {
			critical = e.Critical
		}
	}
	if !critical {
		t.Error("key usage is not critical")
	}
	if len(root.Subject.Organization) != 1 || root.Subject.Organization[0] != "cluster.local" {
		t.Errorf("organization = %v; want [cluster.local]", root.Subject.Organization)
	}
	if n := root.SerialNumber.BitLen(); n == 0 || n > 128 {
		t.Errorf("serial has %d bits", n)
	}
	if len(root.SubjectKeyId) == 0 {
		t.Error("no subject key id")
	}
	if !root.NotAfter.Equal(t0.Add(DefaultRootTTL)) {
		t.Errorf("NotAfter = %s; want %s", root.NotAfter, t0.Add(DefaultRootTTL))
	}
	if k, ok := root.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P384() {
		t.Errorf("root key %T; want P-384", root.PublicKey)
	}
	m, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.CertChain) != 0 || !bytes.Equal(m.RootCert, m.CACert) {
		t.Error("stored self-signed set: want an empty cert-chain.pem and root-cert.pem = ca-cert.pem")
	}
	if b := c.Current(); b.Version != 1 || len(b.Roots) != 1 || !b.Roots[0].Equal(root) || !bytes.Equal(b.PEM, m.RootCert) {
		t.Errorf("bundle = version %d with %d roots; want version 1 with the root", b.Version, len(b.Roots))
	}
}

func TestLoadReusesTheStoredRoot(t *testing.T) {
	store := NewDirStore(t.TempDir())
	first := newTestCA(t, func(cfg *Config) { cfg.Store = store })
	mustLoad(t, first)
	second := newTestCA(t, func(cfg *Config) { cfg.Store = store })
	mustLoad(t, second)
	if !first.SigningCert().Equal(second.SigningCert()) {
		t.Error("a second CA on the same store made its own root")
	}
}

// racingStore reports no material, then loses Create to a winner.
type racingStore struct{ winner *KeyMaterial }

func (s racingStore) Load(context.Context) (*KeyMaterial, error) { return nil, ErrNotFound }
func (s racingStore) Create(context.Context, *KeyMaterial) (*KeyMaterial, error) {
	return s.winner, nil
}

func TestLoadUsesTheWinnersRoot(t *testing.T) {
	winner := testMaterial(t)
	c, _ := fakeClockCA(t, func(cfg *Config) { cfg.Store = racingStore{winner: winner} })
	certs, _ := parseCerts(winner.CACert)
	if !c.SigningCert().Equal(certs[0]) {
		t.Error("CA signs with its own root, not the one Create returned")
	}
}

type failingStore struct{ err error }

func (s failingStore) Load(context.Context) (*KeyMaterial, error) { return nil, s.err }
func (s failingStore) Create(context.Context, *KeyMaterial) (*KeyMaterial, error) {
	return nil, s.err
}

func TestLoadFailsWhenTheStoreFails(t *testing.T) {
	boom := errors.New("boom")
	c := newTestCA(t, func(cfg *Config) { cfg.Store = failingStore{err: boom} })
	if err := c.Load(context.Background()); !errors.Is(err, boom) || c.Ready() {
		t.Errorf("Load = %v, ready %t; want boom and not ready", err, c.Ready())
	}
}

func TestLoadPrefersThePluggedInCA(t *testing.T) {
	set, root := pluggedIn(t)
	dir := t.TempDir()
	catest.WriteTLSCACerts(t, dir, set)
	c := newTestCA(t, func(cfg *Config) { cfg.CACertsDir = dir })
	mustLoad(t, c)
	if !c.SigningCert().Equal(set.Signing.Cert) || !c.Current().Roots[0].Equal(root.Cert) {
		t.Error("CA does not sign with the plugged-in set")
	}
	mustLoad(t, c) // a second Load is a no-op
	if c.Current().Version != 1 {
		t.Errorf("version %d after a second Load; want 1", c.Current().Version)
	}
}

func TestBeforeLoad(t *testing.T) {
	c := newTestCA(t, nil)
	if c.Ready() || c.Current() != nil || c.SigningCert() != nil {
		t.Error("CA claims a signer before Load")
	}
	updates, cancel := c.Subscribe()
	defer cancel()
	select {
	case b := <-updates:
		t.Errorf("got bundle %d before Load", b.Version)
	default:
	}
	mustLoad(t, c)
	if b := <-updates; b != c.Current() {
		t.Error("subscriber did not get the first bundle")
	}
}

func TestSubscribeGetsTheCurrentBundleThenTheLatest(t *testing.T) {
	c, _ := fakeClockCA(t, nil)
	updates, cancel := c.Subscribe()
	if b := <-updates; b.Version != 1 {
		t.Fatalf("first bundle has version %d; want 1", b.Version)
	}
	// A subscriber that reads nothing while three signers come and go does
	// not block the CA, and then reads the latest.
	for range 3 {
		set, _ := pluggedIn(t)
		c.install(authorityFor(t, set))
	}
	if b := <-updates; b.Version != 4 || b != c.Current() {
		t.Errorf("slow subscriber got version %d; want the latest, 4", b.Version)
	}
	select {
	case b := <-updates:
		t.Errorf("extra bundle %d", b.Version)
	default:
	}
	cancel()
	cancel()
	if _, ok := <-updates; ok {
		t.Error("channel open after cancel")
	}
}

func TestBundlePoolIsSharedAndHoldsTheRoots(t *testing.T) {
	root := catest.NewRoot(t)
	b := newBundle(1, []*x509.Certificate{root.Cert})
	if b.Pool() != b.Pool() {
		t.Error("Pool built twice")
	}
	if _, err := root.Cert.Verify(x509.VerifyOptions{Roots: b.Pool()}); err != nil {
		t.Errorf("root not in pool: %v", err)
	}
	zero := &Bundle{Roots: []*x509.Certificate{root.Cert}}
	if _, err := root.Cert.Verify(x509.VerifyOptions{Roots: zero.Pool()}); err != nil {
		t.Errorf("a Bundle built by hand has no usable pool: %v", err)
	}
}

func TestSignIsConsistentDuringRotation(t *testing.T) {
	c := newTestCA(t, nil)
	mustLoad(t, c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				iss, err := c.Sign(workloadRequest(t, 0))
				if err != nil {
					t.Errorf("Sign: %v", err)
					return
				}
				roots := x509.NewCertPool()
				roots.AppendCertsFromPEM([]byte(iss.Chain[len(iss.Chain)-1]))
				inters := x509.NewCertPool()
				for _, p := range iss.Chain[1 : len(iss.Chain)-1] {
					inters.AppendCertsFromPEM([]byte(p))
				}
				if _, err := iss.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters}); err != nil {
					t.Errorf("returned chain mixes two signers: %v", err)
					return
				}
			}
		})
	}
	for range 5 {
		set, _ := pluggedIn(t)
		c.install(authorityFor(t, set))
	}
}

// authorityFor checks set as a plugged-in CA at the wall clock's time.
func authorityFor(t *testing.T, set catest.CACerts) *authority {
	t.Helper()
	f := set.Files()
	a, err := newAuthority(rawSet{files: istioFiles, cert: f[FileCACert], key: f[FileCAKey],
		chain: f[FileCertChain], roots: f[FileRootCert]}, time.Now(), sourcePluggedIn)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
