package interop

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "istio.io/api/security/v1alpha1"
	istiogrpc "istio.io/istio/pilot/pkg/grpc"
	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/nodeagent/caclient/providers/citadel"
	"istio.io/istio/security/pkg/pki/util"
)

// These tests drive Bulwark's CSR API with Istio's own agent code: the
// citadel CA client pilot-agent uses, CSRs from Istio's pki/util, and the
// TLS dial options from Istio's pilot/pkg/grpc.

const (
	// caSAN is the name pilot-agent expects on istiod's serving certificate.
	caSAN     = "istiod.istio-system.svc"
	clusterID = "Kubernetes"
	certTTL   = time.Hour
)

func TestCitadelClientGetsCertificateWithJWT(t *testing.T) {
	t.Parallel()
	iss := startIssuer(t)
	p := startIstiod(t, iss.IstiodArgs(t, caAudience)...)
	bundle := p.MintCert(t, "istio-system", "bundle-reader").Root
	const id = "spiffe://cluster.local/ns/default/sa/demo"

	keys := map[string]util.CertOptions{
		"an ECDSA P-256 key": {Host: id, ECSigAlg: util.EcdsaSigAlg, ECCCurve: util.P256Curve},
		"an RSA 2048 key":    {Host: id, RSAKeySize: 2048},
	}
	for name, opts := range keys {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client, err := citadel.NewCitadelClient(&security.Options{
				CAEndpoint:    p.SecureGRPCAddr,
				CAEndpointSAN: caSAN,
				ClusterID:     clusterID,
				CredFetcher:   staticToken(iss.Token(t, "default", "demo")),
			}, &citadel.TLSOptions{RootCert: bundle})
			if err != nil {
				t.Fatalf("NewCitadelClient: %v", err)
			}
			defer client.Close()

			csrPEM, _, err := util.GenCSR(opts)
			if err != nil {
				t.Fatalf("GenCSR: %v", err)
			}
			chain, err := client.CSRSign(csrPEM, int64(certTTL/time.Second))
			if err != nil {
				t.Fatalf("CSRSign: %v", err)
			}
			checkIssuedChain(t, chain, id, csrPEM, bundle)
		})
	}
}

func TestCitadelClientGetsCertificateWithClientCertificate(t *testing.T) {
	t.Parallel()
	p := startIstiod(t)
	minted := p.MintCert(t, "interop", "minted")
	const id = "spiffe://cluster.local/ns/interop/sa/minted"

	client, err := citadel.NewCitadelClient(&security.Options{
		CAEndpoint:    p.SecureGRPCAddr,
		CAEndpointSAN: caSAN,
		ClusterID:     clusterID,
	}, &citadel.TLSOptions{RootCert: minted.Root, Key: minted.Key, Cert: minted.CertChain})
	if err != nil {
		t.Fatalf("NewCitadelClient: %v", err)
	}
	defer client.Close()

	csrPEM, _, err := util.GenCSR(util.CertOptions{Host: id, ECSigAlg: util.EcdsaSigAlg})
	if err != nil {
		t.Fatalf("GenCSR: %v", err)
	}
	chain, err := client.CSRSign(csrPEM, int64(certTTL/time.Second))
	if err != nil {
		t.Fatalf("CSRSign: %v", err)
	}
	checkIssuedChain(t, chain, id, csrPEM, minted.Root)
}

// TestServingCertificateNames checks the names agents verify on 15012:
// pilot-agent's default, the fully qualified one, and the legacy
// istio-pilot name older proxies are configured with.
func TestServingCertificateNames(t *testing.T) {
	t.Parallel()
	p := startIstiod(t)
	bundle := p.MintCert(t, "istio-system", "bundle-reader").Root
	pemBytes, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatalf("read trust bundle: %v", err)
	}
	roots := x509.NewCertPool()
	for _, c := range parseCerts(t, pemBytes) {
		roots.AddCert(c)
	}
	names := []string{
		"istiod.istio-system.svc",
		"istiod.istio-system.svc.cluster.local",
		"istio-pilot.istio-system.svc",
		"localhost",
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", p.SecureGRPCAddr, &tls.Config{
				RootCAs:    roots,
				ServerName: name,
				NextProtos: []string{"h2"},
				MinVersion: tls.VersionTLS12,
			})
			if err != nil {
				t.Fatalf("TLS to %s as %s: %v", p.SecureGRPCAddr, name, err)
			}
			conn.Close()
		})
	}
}

// TestCSRRefusals calls CreateCertificate with the generated istio.io/api
// client over Istio's TLS dial options, so the status code is visible (the
// citadel client folds it into a string).
func TestCSRRefusals(t *testing.T) {
	t.Parallel()
	iss := startIssuer(t)
	p := startIstiod(t, iss.IstiodArgs(t, caAudience)...)
	minted := p.MintCert(t, "default", "demo")

	tests := map[string]struct {
		token    string      // bearer token, if any
		cert     *mintedCert // client certificate, if any
		identity string      // identity the CSR asks for
		want     codes.Code
	}{
		"a token for another audience is unauthenticated": {
			token: iss.Token(t, "default", "demo", func(c *jwt.Claims) {
				c.Audience = jwt.Audience{"another-audience"}
			}),
			identity: "spiffe://cluster.local/ns/default/sa/demo",
			want:     codes.Unauthenticated,
		},
		"an expired token is unauthenticated": {
			token: iss.Token(t, "default", "demo", func(c *jwt.Claims) {
				c.IssuedAt = jwt.NewNumericDate(time.Now().Add(-2 * time.Hour))
				c.NotBefore = c.IssuedAt
				c.Expiry = jwt.NewNumericDate(time.Now().Add(-time.Hour))
			}),
			identity: "spiffe://cluster.local/ns/default/sa/demo",
			want:     codes.Unauthenticated,
		},
		"a token from another issuer is unauthenticated": {
			token:    startIssuer(t).Token(t, "default", "demo"),
			identity: "spiffe://cluster.local/ns/default/sa/demo",
			want:     codes.Unauthenticated,
		},
		"a caller without credentials is unauthenticated": {
			identity: "spiffe://cluster.local/ns/default/sa/demo",
			want:     codes.Unauthenticated,
		},
		"a token holder asking for another namespace's identity is denied": {
			token:    iss.Token(t, "default", "demo"),
			identity: "spiffe://cluster.local/ns/other/sa/demo",
			want:     codes.PermissionDenied,
		},
		"a token holder asking for another service account's identity is denied": {
			token:    iss.Token(t, "default", "demo"),
			identity: "spiffe://cluster.local/ns/default/sa/admin",
			want:     codes.PermissionDenied,
		},
		"a certificate holder asking for another namespace's identity is denied": {
			cert:     &minted,
			identity: "spiffe://cluster.local/ns/other/sa/demo",
			want:     codes.PermissionDenied,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client := dialCA(t, p, minted.Root, tc.cert)
			csrPEM, _, err := util.GenCSR(util.CertOptions{Host: tc.identity, ECSigAlg: util.EcdsaSigAlg})
			if err != nil {
				t.Fatalf("GenCSR: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "ClusterID", clusterID)
			if tc.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
			}
			resp, err := client.CreateCertificate(ctx, &pb.IstioCertificateRequest{
				Csr:              string(csrPEM),
				ValidityDuration: int64(certTTL / time.Second),
			})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("CreateCertificate: got code %v (err %v, %d certificates), want %v",
					got, err, len(resp.GetCertChain()), tc.want)
			}
		})
	}
}

// dialCA connects to istiod's CSR API as pilot-agent does, optionally
// presenting a client certificate.
func dialCA(t *testing.T, p *istiod, rootCert string, cert *mintedCert) pb.IstioCertificateServiceClient {
	t.Helper()
	tlsOpts := &istiogrpc.TLSOptions{RootCert: rootCert, ServerAddress: p.SecureGRPCAddr, SAN: caSAN}
	if cert != nil {
		tlsOpts.Key, tlsOpts.Cert = cert.Key, cert.CertChain
	}
	opts, err := istiogrpc.ClientOptions(nil, tlsOpts)
	if err != nil {
		t.Fatalf("client options: %v", err)
	}
	conn, err := grpc.NewClient(p.SecureGRPCAddr, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v", p.SecureGRPCAddr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// checkIssuedChain checks a CreateCertificate answer the way a peer relies
// on it: leaf first carrying exactly the asked identity and the CSR's key,
// roots last, valid for both mTLS directions under the trust bundle, and
// no longer-lived than asked.
func checkIssuedChain(t *testing.T, chain []string, wantID string, csrPEM []byte, bundleFile string) {
	t.Helper()
	if len(chain) < 2 {
		t.Fatalf("chain has %d elements, want at least 2 (leaf ... root)", len(chain))
	}
	var certs [][]*x509.Certificate
	for i, elem := range chain {
		c := parseCerts(t, []byte(elem))
		if len(c) == 0 {
			t.Fatalf("chain element %d holds no certificate:\n%s", i, elem)
		}
		certs = append(certs, c)
	}
	leaf := certs[0][0]
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantID {
		t.Errorf("leaf URI SANs = %v, want exactly [%s]", leaf.URIs, wantID)
	}
	if leaf.IsCA {
		t.Errorf("leaf is a CA certificate")
	}
	block, _ := pem.Decode(csrPEM)
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatalf("parse own CSR: %v", err)
	}
	if pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(csr.PublicKey) {
		t.Errorf("leaf public key is not the CSR's")
	}
	if limit := time.Now().Add(certTTL + time.Minute); leaf.NotAfter.After(limit) {
		t.Errorf("leaf expires %v, later than the %v asked for", leaf.NotAfter, certTTL)
	}

	intermediates := x509.NewCertPool()
	for _, c := range certs[0][1:] {
		intermediates.AddCert(c)
	}
	for _, elem := range certs[1 : len(certs)-1] {
		for _, c := range elem {
			intermediates.AddCert(c)
		}
	}
	chainRoots := x509.NewCertPool()
	for _, c := range certs[len(certs)-1] {
		chainRoots.AddCert(c)
	}
	bundlePEM, err := os.ReadFile(bundleFile)
	if err != nil {
		t.Fatalf("read trust bundle: %v", err)
	}
	bundleRoots := x509.NewCertPool()
	for _, c := range parseCerts(t, bundlePEM) {
		bundleRoots.AddCert(c)
	}
	roots := map[string]*x509.CertPool{"the chain's last element": chainRoots, "the trust bundle": bundleRoots}
	for rootsName, pool := range roots {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
			_, err := leaf.Verify(x509.VerifyOptions{
				Roots:         pool,
				Intermediates: intermediates,
				KeyUsages:     []x509.ExtKeyUsage{usage},
			})
			if err != nil {
				t.Errorf("leaf does not verify under %s for usage %v: %v", rootsName, usage, err)
			}
		}
	}
}

func parseCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			t.Fatalf("unexpected PEM block %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("parse certificate: %v", err)
		}
		out = append(out, c)
	}
}

// staticToken is a security.CredFetcher handing out one token, as the
// agent's file-based fetcher does with a projected service account token.
type staticToken string

var _ security.CredFetcher = staticToken("")

func (s staticToken) GetPlatformCredential() (string, error) { return string(s), nil }
func (s staticToken) GetIdentityProvider() string            { return "" }
func (s staticToken) Stop()                                  {}
