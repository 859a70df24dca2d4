package service

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/bulwark-mesh/bulwark/internal/logtest"
	"github.com/bulwark-mesh/bulwark/pkg/authn"
	"github.com/bulwark-mesh/bulwark/pkg/ca"
)

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

func newCA(t *testing.T) *ca.CA {
	t.Helper()
	c, err := ca.New(ca.Config{TrustDomain: td, Store: ca.NewDirStore(t.TempDir()), CACertsDir: t.TempDir() + "/cacerts"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// fixedCaller authenticates every request as one caller, or fails.
type fixedCaller struct {
	caller *authn.Caller
	err    error
}

func (f fixedCaller) Kind() string { return "fixed" }
func (f fixedCaller) Authenticate(context.Context) (*authn.Caller, error) {
	return f.caller, f.err
}

func csrPEM(t *testing.T, uris ...string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return csrFor(t, key, uris...)
}

func csrFor(t *testing.T, key crypto.Signer, uris ...string) string {
	t.Helper()
	tmpl := &x509.CertificateRequest{}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

type failingSigner struct{ err error }

func (f failingSigner) Sign(ca.SignRequest) (*ca.Issued, error) { return nil, f.err }

func TestCreateCertificate(t *testing.T) {
	authority := newCA(t)
	demo := spiffeid.RequireFromString("spiffe://cluster.local/ns/default/sa/demo")
	caller := &authn.Caller{Identities: []spiffeid.ID{demo}, Authenticator: authn.KindClientCert}

	tests := map[string]struct {
		authn    authn.Authenticator
		signer   Signer
		req      *pb.IstioCertificateRequest
		code     codes.Code
		identity string
		ttl      time.Duration
	}{
		"a csr for the caller's identity is signed": {
			req:      &pb.IstioCertificateRequest{Csr: csrPEM(t, demo.String()), ValidityDuration: 3600},
			identity: demo.String(), ttl: time.Hour,
		},
		"a csr without identities gets the caller's": {
			req:      &pb.IstioCertificateRequest{Csr: csrPEM(t)},
			identity: demo.String(), ttl: 24 * time.Hour,
		},
		"a zero ttl means the default": {
			req:      &pb.IstioCertificateRequest{Csr: csrPEM(t), ValidityDuration: 0},
			identity: demo.String(), ttl: 24 * time.Hour,
		},
		"a negative ttl means the default": {
			req:      &pb.IstioCertificateRequest{Csr: csrPEM(t), ValidityDuration: -5},
			identity: demo.String(), ttl: 24 * time.Hour,
		},
		"no credentials are unauthenticated": {
			authn: fixedCaller{err: authn.ErrNoCredentials},
			req:   &pb.IstioCertificateRequest{Csr: csrPEM(t)},
			code:  codes.Unauthenticated,
		},
		"bad credentials are unauthenticated": {
			authn: fixedCaller{err: errors.New("token expired")},
			req:   &pb.IstioCertificateRequest{Csr: csrPEM(t)},
			code:  codes.Unauthenticated,
		},
		"an unreachable authentication backend is unavailable, which agents retry": {
			authn: fixedCaller{err: fmt.Errorf("kubernetes: review token: %w: dial tcp: connection refused", authn.ErrUnavailable)},
			req:   &pb.IstioCertificateRequest{Csr: csrPEM(t)},
			code:  codes.Unavailable,
		},
		"a chain where one authenticator refused and another could not judge is unavailable": {
			authn: authn.Chain{
				fixedCaller{err: fmt.Errorf("bad token: %w", authn.ErrInvalidToken)},
				fixedCaller{err: fmt.Errorf("review token: %w", authn.ErrUnavailable)},
			},
			req:  &pb.IstioCertificateRequest{Csr: csrPEM(t)},
			code: codes.Unavailable,
		},
		"another namespace's identity is denied": {
			req:  &pb.IstioCertificateRequest{Csr: csrPEM(t, "spiffe://cluster.local/ns/kube-system/sa/demo")},
			code: codes.PermissionDenied,
		},
		"two identities, both the caller's, are refused": {
			req:  &pb.IstioCertificateRequest{Csr: csrPEM(t, demo.String(), demo.String())},
			code: codes.InvalidArgument,
		},
		"garbage is an invalid argument": {
			req:  &pb.IstioCertificateRequest{Csr: "not a csr"},
			code: codes.InvalidArgument,
		},
		"a ttl above the maximum is refused": {
			req:  &pb.IstioCertificateRequest{Csr: csrPEM(t), ValidityDuration: int64(91 * 24 * 3600)},
			code: codes.InvalidArgument,
		},
		"a ttl of max int64 seconds does not overflow": {
			req:  &pb.IstioCertificateRequest{Csr: csrPEM(t), ValidityDuration: math.MaxInt64},
			code: codes.InvalidArgument,
		},
		"a signer failure is internal and opaque": {
			signer: failingSigner{err: errors.New("hsm on fire")},
			req:    &pb.IstioCertificateRequest{Csr: csrPEM(t)},
			code:   codes.Internal,
		},
		"a signer that is not ready is unavailable": {
			signer: failingSigner{err: ca.ErrNotReady},
			req:    &pb.IstioCertificateRequest{Csr: csrPEM(t)},
			code:   codes.Unavailable,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if tc.authn == nil {
				tc.authn = fixedCaller{caller: caller}
			}
			if tc.signer == nil {
				tc.signer = authority
			}
			svc := New(Config{Authenticator: tc.authn, Signer: tc.signer, Metrics: NewMetrics(prometheus.NewRegistry())})
			resp, err := svc.CreateCertificate(context.Background(), tc.req)
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
			if tc.code != codes.OK {
				if msg := status.Convert(err).Message(); strings.Contains(msg, "fire") || strings.Contains(msg, "token") {
					t.Errorf("error detail leaked to the client: %q", msg)
				}
				return
			}
			chain := resp.GetCertChain()
			if len(chain) < 2 {
				t.Fatalf("chain has %d elements, Istio's agent needs at least 2", len(chain))
			}
			leaf := parseLeaf(t, chain[0])
			if len(leaf.URIs) != 1 || leaf.URIs[0].String() != tc.identity {
				t.Errorf("URI SANs = %v, want exactly %s", leaf.URIs, tc.identity)
			}
			if got := leaf.NotAfter.Sub(leaf.NotBefore); got < tc.ttl || got > tc.ttl+5*time.Minute {
				t.Errorf("lifetime = %v, want %v plus backdating", got, tc.ttl)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM([]byte(chain[len(chain)-1])) {
				t.Fatal("last element holds no roots")
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("leaf does not verify against the returned roots: %v", err)
			}
		})
	}
}

func parseLeaf(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		t.Fatal("leaf is not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRateLimitAnswersResourceExhausted(t *testing.T) {
	demo := spiffeid.RequireFromString("spiffe://cluster.local/ns/default/sa/demo")
	svc := New(Config{
		Authenticator: fixedCaller{caller: &authn.Caller{Identities: []spiffeid.ID{demo}}},
		Signer:        newCA(t),
		Metrics:       NewMetrics(prometheus.NewRegistry()),
		RateLimit:     0.001,
		Burst:         2,
	})
	req := &pb.IstioCertificateRequest{Csr: csrPEM(t)}
	var codesSeen []codes.Code
	for range 4 {
		_, err := svc.CreateCertificate(context.Background(), req)
		codesSeen = append(codesSeen, status.Code(err))
	}
	want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}
	for i := range want {
		if codesSeen[i] != want[i] {
			t.Fatalf("codes = %v, want %v", codesSeen, want)
		}
	}
	if got := testutil.ToFloat64(svc.metrics.rateLimited); got != 2 {
		t.Errorf("rate-limited count = %v, want 2", got)
	}
}

func TestMetricsCountOutcomes(t *testing.T) {
	demo := spiffeid.RequireFromString("spiffe://cluster.local/ns/default/sa/demo")
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	ok := New(Config{Authenticator: fixedCaller{caller: &authn.Caller{Identities: []spiffeid.ID{demo}}}, Signer: newCA(t), Metrics: m})
	denied := New(Config{Authenticator: fixedCaller{err: errors.New("bad")}, Signer: newCA(t), Metrics: m})
	unavailable := New(Config{Authenticator: fixedCaller{err: authn.ErrUnavailable}, Signer: newCA(t), Metrics: m})

	ok.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{Csr: csrPEM(t)})
	ok.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{Csr: "junk"})
	denied.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{Csr: csrPEM(t)})
	unavailable.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{Csr: csrPEM(t)})

	for name, tc := range map[string]struct {
		counter prometheus.Counter
		want    float64
	}{
		"csrs":                    {m.csrs, 4},
		"issued certificates":     {m.issued, 1},
		"unparseable csrs":        {m.parseErrors, 1},
		"authentication failures": {m.authnFailures, 2},
		"backend unavailable":     {m.authnUnavailable, 1},
	} {
		if got := testutil.ToFloat64(tc.counter); got != tc.want {
			t.Errorf("%s = %v, want %v", name, got, tc.want)
		}
	}
	names := []string{
		"citadel_server_csr_count", "citadel_server_authentication_failure_count",
		"citadel_server_csr_parsing_err_count", "citadel_server_success_cert_issuance_count",
	}
	if n, err := testutil.GatherAndCount(reg, names...); err != nil || n != len(names) {
		t.Errorf("Istio's metric names: %d of %d registered (%v)", n, len(names), err)
	}
}

// The issuance line and metric name the cluster that authenticated the
// caller (the Caller's ClusterID), not a header the caller sent.
func TestIssuanceRecordsTheAuthenticatingCluster(t *testing.T) {
	demo := spiffeid.RequireFromString("spiffe://cluster.local/ns/default/sa/demo")
	logs, log := logtest.New(t)
	m := NewMetrics(prometheus.NewRegistry())
	s := New(Config{Authenticator: fixedCaller{caller: &authn.Caller{Identities: []spiffeid.ID{demo}, ClusterID: "B"}},
		Signer: newCA(t), Metrics: m, Logger: log})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("clusterid", "claimed-elsewhere"))
	if _, err := s.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: csrPEM(t)}); err != nil {
		t.Fatal(err)
	}
	if logs.Count("certificate issued", "cluster=B") != 1 || logs.Count("claimed-elsewhere") != 0 {
		t.Fatal("the issuance line does not name the authenticating cluster alone")
	}
	if got := testutil.ToFloat64(m.issuedByCluster.WithLabelValues("B")); got != 1 {
		t.Fatalf("issued for B = %v", got)
	}
}
