package ca

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// misbehave is how a test issuer departs from what it was asked: it may
// change a copy of the template, the parent, the subject key and the
// signing key before signing.
type misbehave func(tmpl, parent *x509.Certificate, pub *crypto.PublicKey, priv *crypto.Signer)

// withIssuer returns c with its current authority issuing through m.
func withIssuer(t *testing.T, c *CA, m misbehave) {
	t.Helper()
	a := *c.auth.Load()
	a.create = func(r io.Reader, tmpl, parent *x509.Certificate, pub, priv any) ([]byte, error) {
		t2, p2 := *tmpl, *parent
		pk, sk := pub.(crypto.PublicKey), priv.(crypto.Signer)
		m(&t2, &p2, &pk, &sk)
		return x509.CreateCertificate(r, &t2, &p2, pk, sk)
	}
	c.auth.Store(&a)
}

func TestSignNeverReturnsALeafOtherThanAsked(t *testing.T) {
	other := catest.NewRoot(t, catest.WithCommonName("Another CA"))
	otherKey := catest.NewKey(t)
	tests := map[string]struct {
		m       misbehave // nil: an honest issuer
		wantErr string
	}{
		"an honest issuer's leaf is returned": {},
		"a leaf issued by another CA is refused": {
			m:       func(_, p *x509.Certificate, _ *crypto.PublicKey, k *crypto.Signer) { *p, *k = *other.Cert, other.Key },
			wantErr: "issuer",
		},
		"a leaf naming another authority key is refused": {
			m:       func(_, p *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) { p.SubjectKeyId = []byte{1, 2, 3} },
			wantErr: "authority key ID",
		},
		"a leaf valid longer than asked is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.NotAfter = tm.NotAfter.Add(time.Hour)
			},
			wantErr: "later than",
		},
		"a leaf valid past the chain is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.NotAfter = tm.NotAfter.Add(20 * 365 * 24 * time.Hour)
			},
			wantErr: "outside the chain",
		},
		"a leaf valid earlier than asked is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.NotBefore = tm.NotBefore.Add(-time.Minute)
			},
			wantErr: "earlier than",
		},
		"a leaf for another identity is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.URIs = []*url.URL{testID("kube-system", "admin").URL()}
			},
			wantErr: "URI SANs",
		},
		"a leaf with an added DNS name is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.DNSNames = []string{"evil.example"}
			},
			wantErr: "DNS SANs",
		},
		"a leaf with an IP SAN is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.IPAddresses = []net.IP{net.IPv4(10, 0, 0, 1)}
			},
			wantErr: "IP or email",
		},
		"a leaf with a subject is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.Subject = pkix.Name{CommonName: "admin"}
			},
			wantErr: "subject",
		},
		"a leaf for another key is refused": {
			m:       func(_, _ *x509.Certificate, pk *crypto.PublicKey, _ *crypto.Signer) { *pk = otherKey.Public() },
			wantErr: "public key",
		},
		"a CA certificate is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.IsCA, tm.KeyUsage = true, tm.KeyUsage|x509.KeyUsageCertSign
			},
			wantErr: "end-entity",
		},
		"a leaf with the keyCertSign usage is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.KeyUsage |= x509.KeyUsageCertSign
			},
			wantErr: "key usage",
		},
		"a leaf with another extended key usage is refused": {
			m: func(tm, _ *x509.Certificate, _ *crypto.PublicKey, _ *crypto.Signer) {
				tm.ExtKeyUsage = append(tm.ExtKeyUsage, x509.ExtKeyUsageCodeSigning)
			},
			wantErr: "extended key usages",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, clock := fakeClockCA(t, nil)
			clock.Advance(time.Hour) // leaves room between the chain's start and the leaf's
			if tc.m != nil {
				withIssuer(t, c, tc.m)
			}
			iss, err := c.Sign(workloadRequest(t, time.Hour))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Sign: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Sign = %v, %v; want an error about %q", iss, err, tc.wantErr)
			}
		})
	}
}

// badSigner signs with another key than the one it claims.
type badSigner struct {
	crypto.Signer
	claims crypto.PublicKey
}

func (s badSigner) Public() crypto.PublicKey { return s.claims }

func TestSignNeverReturnsALeafWithABadSignature(t *testing.T) {
	tests := map[string]func(a *authority) crypto.Signer{
		"a signer whose signatures its key does not verify is refused": func(a *authority) crypto.Signer {
			return badSigner{Signer: catest.NewKey(t), claims: a.signer.Public()}
		},
		"a signer whose key is not the signing certificate's is refused": func(*authority) crypto.Signer {
			return catest.NewKey(t)
		},
	}
	for name, signer := range tests {
		t.Run(name, func(t *testing.T) {
			c, _ := fakeClockCA(t, nil)
			a := *c.auth.Load()
			a.signer = signer(&a)
			c.auth.Store(&a)
			if iss, err := c.Sign(workloadRequest(t, time.Hour)); err == nil {
				t.Fatalf("Sign = %v; want an error", iss.Leaf)
			}
		})
	}
}

func TestChainsThatConstrainLeaves(t *testing.T) {
	key := catest.NewKey(t)
	tests := map[string]struct {
		rootOpt   catest.Option
		refusedAt string // "load", "sign" or "" for never
	}{
		"a path length that leaves no room for a leaf is refused at load": {
			rootOpt:   func(c *x509.Certificate, _ *crypto.Signer) { c.MaxPathLen, c.MaxPathLenZero = 0, true },
			refusedAt: "load",
		},
		"name constraints another trust domain meets refuse the leaf": {
			rootOpt:   func(c *x509.Certificate, _ *crypto.Signer) { c.PermittedURIDomains = []string{"other.domain"} },
			refusedAt: "sign",
		},
		"name constraints the trust domain meets admit the leaf": {
			rootOpt: func(c *x509.Certificate, _ *crypto.Signer) { c.PermittedURIDomains = []string{"cluster.local"} },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := catest.NewRoot(t, tc.rootOpt)
			inter := catest.NewIntermediate(t, root, catest.WithKey(key))
			set := catest.CACerts{Signing: inter, Roots: []*catest.Cert{root}}
			f := set.Files()
			a, err := newAuthority(rawSet{files: istioFiles, cert: f[FileCACert], key: f[FileCAKey],
				chain: f[FileCertChain], roots: f[FileRootCert]}, time.Now(), sourcePluggedIn)
			if (err != nil) != (tc.refusedAt == "load") {
				t.Fatalf("newAuthority: %v; want refused: %t", err, tc.refusedAt == "load")
			}
			if err != nil {
				return
			}
			c := newTestCA(t, nil)
			c.install(a)
			_, err = c.Sign(SignRequest{PublicKey: catest.NewKey(t).Public(), Identities: []spiffeid.ID{testID("foo", "app")}})
			if (err != nil) != (tc.refusedAt == "sign") {
				t.Fatalf("Sign: %v; want refused: %t", err, tc.refusedAt == "sign")
			}
		})
	}
}
