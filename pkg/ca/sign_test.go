package ca

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// t0 is a whole second: certificates encode times to the second.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fakeClockCA(t *testing.T, change func(*Config)) (*CA, *catest.Clock) {
	t.Helper()
	clock := catest.NewClock(t0)
	c := newTestCA(t, func(cfg *Config) {
		cfg.Clock = clock.Now
		if change != nil {
			change(cfg)
		}
	})
	mustLoad(t, c)
	return c, clock
}

func workloadRequest(t testing.TB, ttl time.Duration) SignRequest {
	return SignRequest{PublicKey: catest.NewKey(t).Public(), Identities: []spiffeid.ID{testID("foo", "app")}, TTL: ttl}
}

func TestSignTTL(t *testing.T) {
	c, _ := fakeClockCA(t, func(cfg *Config) { cfg.MaxTTL = 48 * time.Hour })
	tests := map[string]struct {
		ttl          time.Duration
		wantNotAfter time.Time
		wantErr      error
	}{
		"a zero TTL gets the default":                         {ttl: 0, wantNotAfter: t0.Add(DefaultWorkloadTTL)},
		"a negative TTL gets the default":                     {ttl: -time.Hour, wantNotAfter: t0.Add(DefaultWorkloadTTL)},
		"a TTL below the maximum is kept":                     {ttl: time.Hour, wantNotAfter: t0.Add(time.Hour)},
		"a TTL equal to the maximum is kept":                  {ttl: 48 * time.Hour, wantNotAfter: t0.Add(48 * time.Hour)},
		"a TTL above the maximum is refused":                  {ttl: 48*time.Hour + time.Second, wantErr: ErrInvalidTTL},
		"the largest duration is refused without overflowing": {ttl: math.MaxInt64, wantErr: ErrInvalidTTL},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			iss, err := c.Sign(workloadRequest(t, tc.ttl))
			wantErrIs(t, err, tc.wantErr)
			if err != nil {
				return
			}
			if !iss.Leaf.NotAfter.Equal(tc.wantNotAfter) {
				t.Errorf("NotAfter = %s; want %s", iss.Leaf.NotAfter, tc.wantNotAfter)
			}
			if want := t0.Add(-DefaultBackdate); !iss.Leaf.NotBefore.Equal(want) {
				t.Errorf("NotBefore = %s; want %s", iss.Leaf.NotBefore, want)
			}
		})
	}
}

func TestSignClampsNotAfterToTheChain(t *testing.T) {
	tests := map[string]struct {
		rootEnd, interEnd time.Time
		want              time.Time
	}{
		"the signing certificate's end caps the leaf": {
			rootEnd: t0.Add(1000 * time.Hour), interEnd: t0.Add(time.Hour), want: t0.Add(time.Hour)},
		"a root ending before the signing certificate caps the leaf": {
			rootEnd: t0.Add(2 * time.Hour), interEnd: t0.Add(1000 * time.Hour), want: t0.Add(2 * time.Hour)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := catest.NewRoot(t, catest.WithValidity(t0.Add(-time.Hour), tc.rootEnd))
			inter := catest.NewIntermediate(t, root, catest.WithValidity(t0.Add(-time.Hour), tc.interEnd))
			dir := t.TempDir()
			catest.WriteCACerts(t, dir, catest.CACerts{Signing: inter, Roots: []*catest.Cert{root}})
			c, _ := fakeClockCA(t, func(cfg *Config) { cfg.CACertsDir = dir })
			iss, err := c.Sign(workloadRequest(t, 24*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if !iss.Leaf.NotAfter.Equal(tc.want) {
				t.Errorf("NotAfter = %s; want %s", iss.Leaf.NotAfter, tc.want)
			}
		})
	}
}

func TestSignRefusesOutsideTheSignersValidity(t *testing.T) {
	tests := map[string]time.Duration{
		"after the signing certificate expired":   DefaultRootTTL + time.Second,
		"before the signing certificate is valid": -DefaultBackdate - time.Second,
	}
	for name, shift := range tests {
		t.Run(name, func(t *testing.T) {
			c, clock := fakeClockCA(t, nil)
			clock.Advance(shift)
			_, err := c.Sign(workloadRequest(t, 0))
			wantErrIs(t, err, ErrSignerExpired)
		})
	}
}

func TestSignRefusesBadRequests(t *testing.T) {
	c, _ := fakeClockCA(t, nil)
	key := catest.NewKey(t).Public()
	foo := testID("foo", "app")
	tests := map[string]struct {
		req  SignRequest
		want error
	}{
		"an RSA-1024 key is refused": {
			req: SignRequest{PublicKey: catest.NewRSAKey(t, 1024).Public(), Identities: []spiffeid.ID{foo}}, want: ErrInvalidCSR},
		"a missing key is refused": {req: SignRequest{Identities: []spiffeid.ID{foo}}, want: ErrInvalidCSR},
		"two identities are refused": {
			req: SignRequest{PublicKey: key, Identities: []spiffeid.ID{foo, testID("bar", "app")}}, want: ErrInvalidCSR},
		"an empty identity is refused": {
			req: SignRequest{PublicKey: key, Identities: []spiffeid.ID{{}}}, want: ErrInvalidCSR},
		"a request naming nothing is refused": {req: SignRequest{PublicKey: key}, want: ErrInvalidCSR},
		"an identity in another trust domain is refused": {
			req:  SignRequest{PublicKey: key, Identities: []spiffeid.ID{spiffeid.RequireFromString("spiffe://evil.example/ns/foo/sa/app")}},
			want: ErrIdentityNotAllowed},
		"an empty DNS name is refused": {req: SignRequest{PublicKey: key, DNSNames: []string{""}}, want: ErrInvalidCSR},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := c.Sign(tc.req)
			wantErrIs(t, err, tc.want)
		})
	}
}

func TestSignBeforeLoadIsNotReady(t *testing.T) {
	c := newTestCA(t, nil)
	_, err := c.Sign(workloadRequest(t, 0))
	wantErrIs(t, err, ErrNotReady)
}

var (
	oidSAN             = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidExtKeyUsage     = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidAuthorityKeyID  = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidSubjectKeyID    = asn1.ObjectIdentifier{2, 5, 29, 14}
	wantLeafExtensions = map[string]bool{ // OID → critical
		oidKeyUsage.String():         true,
		oidExtKeyUsage.String():      false,
		oidBasicConstraints.String(): true,
		oidAuthorityKeyID.String():   false,
		oidSAN.String():              true,
	}
)

func TestWorkloadCertificateHasExactlyTheSVIDExtensions(t *testing.T) {
	c, _ := fakeClockCA(t, nil)
	id := testID("foo", "app")
	iss, err := c.Sign(SignRequest{PublicKey: catest.NewKey(t).Public(), Identities: []spiffeid.ID{id}})
	if err != nil {
		t.Fatal(err)
	}
	leaf := iss.Leaf
	got := map[string]bool{}
	for _, e := range leaf.Extensions {
		got[e.Id.String()] = e.Critical
	}
	if !maps.Equal(got, wantLeafExtensions) {
		t.Errorf("extensions (OID → critical) = %v; want %v", got, wantLeafExtensions)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id.String() {
		t.Errorf("URIs = %v; want [%s]", leaf.URIs, id)
	}
	if len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
		t.Errorf("unexpected SANs: %v %v %v", leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
	}
	if len(leaf.Subject.Names) != 0 {
		t.Errorf("subject = %q; want empty", leaf.Subject)
	}
	if want := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment; leaf.KeyUsage != want {
		t.Errorf("KeyUsage = %b; want %b", leaf.KeyUsage, want)
	}
	if want := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}; !slices.Equal(leaf.ExtKeyUsage, want) {
		t.Errorf("ExtKeyUsage = %v; want %v", leaf.ExtKeyUsage, want)
	}
	if leaf.IsCA || !leaf.BasicConstraintsValid {
		t.Errorf("IsCA = %t, BasicConstraintsValid = %t; want false, true", leaf.IsCA, leaf.BasicConstraintsValid)
	}
	if n := leaf.SerialNumber.BitLen(); n == 0 || n > 128 {
		t.Errorf("serial has %d bits; want 1 to 128", n)
	}
	if ski := c.SigningCert().SubjectKeyId; len(ski) == 0 || string(leaf.AuthorityKeyId) != string(ski) {
		t.Errorf("AuthorityKeyId = %x; want the signer's SubjectKeyId %x", leaf.AuthorityKeyId, ski)
	}
}

func TestServingCertificateHasDNSNamesOnly(t *testing.T) {
	c, _ := fakeClockCA(t, nil)
	names := []string{"istiod.istio-system.svc", "istiod.istio-system.svc.cluster.local"}
	iss, err := c.Sign(SignRequest{PublicKey: catest.NewKey(t).Public(), DNSNames: names})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(iss.Leaf.DNSNames, names) || len(iss.Leaf.URIs) != 0 {
		t.Errorf("DNSNames = %v, URIs = %v; want %v and none", iss.Leaf.DNSNames, iss.Leaf.URIs, names)
	}
	if _, err := iss.Leaf.Verify(x509.VerifyOptions{
		DNSName: names[0], Roots: c.Current().Pool(), CurrentTime: t0,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		t.Errorf("serving certificate does not verify for %s: %v", names[0], err)
	}
}

func TestSignedChainOrder(t *testing.T) {
	root := catest.NewRoot(t)
	root2 := catest.NewRoot(t)
	inter := catest.NewIntermediate(t, root)
	inter2 := catest.NewIntermediate(t, inter)
	tests := map[string]struct {
		set       *catest.CACerts // nil: self-signed
		wantChain int
		wantRoots int
	}{
		"a self-signed root gives leaf then root": {wantChain: 2, wantRoots: 1},
		"a plugged-in intermediate gives leaf, intermediate, root": {
			set: &catest.CACerts{Signing: inter, Roots: []*catest.Cert{root}}, wantChain: 3, wantRoots: 1},
		"two intermediates come nearest first": {
			set: &catest.CACerts{Signing: inter2, Intermediates: []*catest.Cert{inter}, Roots: []*catest.Cert{root}}, wantChain: 4, wantRoots: 1},
		"several roots are one last element": {
			set: &catest.CACerts{Signing: inter, Roots: []*catest.Cert{root2, root}}, wantChain: 3, wantRoots: 2},
		"a plugged-in root that signs itself gives leaf then roots": {
			set: &catest.CACerts{Signing: root, Roots: []*catest.Cert{root}}, wantChain: 2, wantRoots: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newTestCA(t, func(cfg *Config) {
				if tc.set != nil {
					cfg.CACertsDir = t.TempDir()
					catest.WriteCACerts(t, cfg.CACertsDir, *tc.set)
				}
			})
			mustLoad(t, c)
			iss, err := c.Sign(workloadRequest(t, 0))
			if err != nil {
				t.Fatal(err)
			}
			if len(iss.Chain) != tc.wantChain {
				t.Fatalf("chain has %d elements; want %d", len(iss.Chain), tc.wantChain)
			}
			certs := make([][]*x509.Certificate, len(iss.Chain))
			for i, p := range iss.Chain {
				certs[i] = parsePEMCerts(t, p)
			}
			if len(certs[0]) != 1 || !certs[0][0].Equal(iss.Leaf) {
				t.Errorf("first element is not the leaf")
			}
			last := certs[len(certs)-1]
			if len(last) != tc.wantRoots || string(c.Current().PEM) != iss.Chain[len(iss.Chain)-1] {
				t.Errorf("last element has %d certificates; want the %d roots of the bundle", len(last), tc.wantRoots)
			}
			inters := x509.NewCertPool()
			for i, cs := range certs[1 : len(certs)-1] {
				if len(cs) != 1 {
					t.Errorf("intermediate element %d has %d certificates; want 1", i, len(cs))
				}
				inters.AddCert(cs[0])
				if i == 0 && string(cs[0].SubjectKeyId) != string(iss.Leaf.AuthorityKeyId) {
					t.Errorf("first intermediate did not sign the leaf")
				}
			}
			roots := x509.NewCertPool()
			for _, r := range last {
				roots.AddCert(r)
			}
			if _, err := iss.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("chain does not verify: %v", err)
			}
		})
	}
}

func parsePEMCerts(t *testing.T, s string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if strings.TrimSpace(string(rest)) != "" {
		t.Errorf("junk after PEM: %q", rest)
	}
	return out
}
