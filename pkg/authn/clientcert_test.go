package authn

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"google.golang.org/grpc/peer"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func caTemplate(t testing.TB, name string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             t0.Add(-24 * time.Hour),
		NotAfter:              t0.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := caTemplate(t, name)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// sign issues tmpl for a fresh key.
func (ca *testCA) sign(t testing.TB, tmpl *x509.Certificate) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func (ca *testCA) intermediate(t testing.TB, name string) *testCA {
	t.Helper()
	cert, key := ca.sign(t, caTemplate(t, name))
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// workloadTemplate is an X.509-SVID template with the given URI SANs.
func workloadTemplate(t testing.TB, uris ...string) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		NotBefore:    t0.Add(-time.Hour),
		NotAfter:     t0.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return tmpl
}

const workloadID = "spiffe://cluster.local/ns/default/sa/httpbin"

func TestClientCert(t *testing.T) {
	ca := newTestCA(t, "root")
	inter := ca.intermediate(t, "intermediate")
	foreign := newTestCA(t, "foreign")
	leaf := func(mutate func(*x509.Certificate), uris ...string) *x509.Certificate {
		tmpl := workloadTemplate(t, uris...)
		if mutate != nil {
			mutate(tmpl)
		}
		cert, _ := ca.sign(t, tmpl)
		return cert
	}
	interLeaf, _ := inter.sign(t, workloadTemplate(t, workloadID))
	foreignLeaf, _ := foreign.sign(t, workloadTemplate(t, workloadID))
	caAsLeaf, _ := ca.sign(t, func() *x509.Certificate {
		tmpl := caTemplate(t, "sub-ca")
		tmpl.URIs = workloadTemplate(t, workloadID).URIs
		return tmpl
	}())
	tooLong := []*x509.Certificate{interLeaf}
	for range maxPeerChain {
		tooLong = append(tooLong, inter.cert)
	}

	tests := map[string]struct {
		ctx     context.Context
		wantID  string
		wantErr error
	}{
		"a workload certificate from the current CA is accepted": {
			ctx:    tlsPeerContext(context.Background(), leaf(nil, workloadID)),
			wantID: workloadID,
		},
		"a certificate under an intermediate the caller presents is accepted": {
			ctx:    tlsPeerContext(context.Background(), interLeaf, inter.cert),
			wantID: workloadID,
		},
		"a certificate under an intermediate the caller does not present is refused": {
			ctx:     tlsPeerContext(context.Background(), interLeaf),
			wantErr: ErrInvalidCertificate,
		},
		"a certificate from a foreign CA is refused": {
			ctx:     tlsPeerContext(context.Background(), foreignLeaf),
			wantErr: ErrInvalidCertificate,
		},
		"an expired certificate is refused": {
			ctx: tlsPeerContext(context.Background(), leaf(func(c *x509.Certificate) {
				c.NotBefore, c.NotAfter = t0.Add(-2*time.Hour), t0.Add(-time.Second)
			}, workloadID)),
			wantErr: ErrInvalidCertificate,
		},
		"a certificate not yet valid is refused": {
			ctx: tlsPeerContext(context.Background(), leaf(func(c *x509.Certificate) {
				c.NotBefore, c.NotAfter = t0.Add(time.Minute), t0.Add(2*time.Hour)
			}, workloadID)),
			wantErr: ErrInvalidCertificate,
		},
		"a certificate only for server authentication is refused": {
			ctx: tlsPeerContext(context.Background(), leaf(func(c *x509.Certificate) {
				c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			}, workloadID)),
			wantErr: ErrInvalidCertificate,
		},
		"a CA certificate presented as a client certificate is refused": {
			ctx:     tlsPeerContext(context.Background(), caAsLeaf),
			wantErr: ErrInvalidCertificate,
		},
		"a chain longer than the limit is refused": {
			ctx:     tlsPeerContext(context.Background(), tooLong...),
			wantErr: ErrInvalidCertificate,
		},
		"a certificate with two URI SANs is refused": {
			ctx:     tlsPeerContext(context.Background(), leaf(nil, workloadID, "spiffe://cluster.local/ns/kube-system/sa/admin")),
			wantErr: ErrInvalidIdentity,
		},
		"a certificate without a URI SAN is refused": {
			ctx: tlsPeerContext(context.Background(), leaf(func(c *x509.Certificate) {
				c.DNSNames = []string{"httpbin.default.svc"}
			})),
			wantErr: ErrInvalidIdentity,
		},
		"a URI SAN that is not a SPIFFE ID is refused": {
			ctx:     tlsPeerContext(context.Background(), leaf(nil, "https://cluster.local/ns/default/sa/httpbin")),
			wantErr: ErrInvalidIdentity,
		},
		"a SPIFFE ID of another trust domain is refused": {
			ctx:     tlsPeerContext(context.Background(), leaf(nil, "spiffe://evil.example/ns/default/sa/httpbin")),
			wantErr: ErrInvalidIdentity,
		},
		"a SPIFFE ID not shaped /ns/<ns>/sa/<sa> is refused": {
			ctx:     tlsPeerContext(context.Background(), leaf(nil, "spiffe://cluster.local/ns/default/sa/httpbin/extra")),
			wantErr: ErrInvalidIdentity,
		},
		"a SPIFFE ID with the segments swapped is refused": {
			ctx:     tlsPeerContext(context.Background(), leaf(nil, "spiffe://cluster.local/sa/httpbin/ns/default")),
			wantErr: ErrInvalidIdentity,
		},
		"a request without a peer has no credentials": {
			ctx:     context.Background(),
			wantErr: ErrNoCredentials,
		},
		"a peer that is not TLS has no credentials": {
			ctx:     peer.NewContext(context.Background(), &peer.Peer{}),
			wantErr: ErrNoCredentials,
		},
		"a TLS peer without a client certificate has no credentials": {
			ctx:     tlsPeerContext(context.Background()),
			wantErr: ErrNoCredentials,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := NewClientCert(testTD, ca.pool, func() time.Time { return t0 })
			caller, err := a.Authenticate(tc.ctx)
			checkCaller(t, caller, err, wantCaller{err: tc.wantErr, id: tc.wantID, kind: KindClientCert})
		})
	}
}

// A certificate caller is bound to istiod's own cluster: the cluster it
// claims is not recorded.
func TestClientCertIgnoresTheClaimedCluster(t *testing.T) {
	ca := newTestCA(t, "root")
	cert, _ := ca.sign(t, workloadTemplate(t, workloadID))
	a := NewClientCert(testTD, ca.pool, func() time.Time { return t0 })
	caller, err := a.Authenticate(tlsPeerContext(mdContext("clusterid", "east"), cert))
	if err != nil {
		t.Fatal(err)
	}
	if caller.ClusterID != "" {
		t.Errorf("ClusterID = %q, want none (istiod's own cluster)", caller.ClusterID)
	}
}

func TestClientCertUsesTheBundleOfTheMoment(t *testing.T) {
	old, next := newTestCA(t, "old root"), newTestCA(t, "new root")
	cert, _ := old.sign(t, workloadTemplate(t, workloadID))
	roots := old.pool()
	a := NewClientCert(testTD, func() *x509.CertPool { return roots }, func() time.Time { return t0 })
	ctx := tlsPeerContext(context.Background(), cert)
	if _, err := a.Authenticate(ctx); err != nil {
		t.Fatalf("before rotation: %v", err)
	}
	roots = next.pool()
	if _, err := a.Authenticate(ctx); !errors.Is(err, ErrInvalidCertificate) {
		t.Fatalf("after rotation: error = %v, want %v", err, ErrInvalidCertificate)
	}
}

func TestClientCertWithoutBundleFails(t *testing.T) {
	ca := newTestCA(t, "root")
	cert, _ := ca.sign(t, workloadTemplate(t, workloadID))
	a := NewClientCert(testTD, func() *x509.CertPool { return nil }, nil)
	if _, err := a.Authenticate(tlsPeerContext(context.Background(), cert)); !errors.Is(err, ErrInvalidCertificate) {
		t.Fatalf("error = %v, want %v", err, ErrInvalidCertificate)
	}
}

func TestClientCertRemembersVerificationsOnlyWhileValid(t *testing.T) {
	ca := newTestCA(t, "root")
	cert, _ := ca.sign(t, workloadTemplate(t, workloadID))
	roots := ca.pool()
	clock := catest.NewClock(t0)
	a := NewClientCert(testTD, func() *x509.CertPool { return roots }, clock.Now)
	ctx := tlsPeerContext(context.Background(), cert)

	for range 3 {
		caller, err := a.Authenticate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := caller.Identities[0].String(); got != workloadID {
			t.Fatalf("identity = %s, want %s", got, workloadID)
		}
	}
	if n := a.verified.len(); n != 1 {
		t.Fatalf("%d remembered verifications, want 1", n)
	}

	// Past the leaf's NotAfter the remembered verification is gone and the
	// chain is verified afresh, which fails.
	clock.Advance(2 * time.Hour)
	if _, err := a.Authenticate(ctx); !errors.Is(err, ErrInvalidCertificate) {
		t.Fatalf("expired certificate: error = %v, want %v", err, ErrInvalidCertificate)
	}
}

func BenchmarkClientCert(b *testing.B) {
	ca := newTestCA(b, "root")
	cert, _ := ca.sign(b, workloadTemplate(b, workloadID))
	roots := ca.pool()
	a := NewClientCert(testTD, func() *x509.CertPool { return roots }, func() time.Time { return t0 })
	ctx := tlsPeerContext(context.Background(), cert)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Authenticate(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
