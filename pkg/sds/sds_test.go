package sds

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

var gwProxy = Proxy{Namespace: "gw", ServiceAccount: "ingress", Secure: true}

const gwUser = "system:serviceaccount:gw:ingress"

func TestRootCAServedAndUpdated(t *testing.T) {
	f := newFixture(t, nil)
	got := f.srv.Generate(context.Background(), gwProxy, []string{RootCAName})
	if len(got) != 1 || !bytes.Equal(caOf(t, got[0]), f.bundles.Current().PEM) {
		t.Fatalf("ROOTCA = %v, want the current bundle", got)
	}
	drain(f.changes)
	next := catest.NewRoot(t)
	f.bundles.set(next)
	<-f.changes
	got = f.srv.Generate(context.Background(), gwProxy, []string{RootCAName})
	if len(got) != 1 || !bytes.Equal(caOf(t, got[0]), next.CertPEM) {
		t.Fatalf("ROOTCA after rotation = %v, want the new root", got)
	}
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func TestCredentialNames(t *testing.T) {
	root := catest.NewRoot(t)
	gw := leaf(t, root)
	other := leaf(t, root)
	garbage := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "garbage"},
		Data:       map[string][]byte{"tls.crt": []byte("not pem"), "tls.key": []byte("nope"), "ca.crt": []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")},
	}
	mismatched := tlsSecret("gw", "mismatched", gw, nil)
	mismatched.Data["tls.key"] = other.KeyPEM
	huge := tlsSecret("gw", "huge", gw, root.CertPEM)
	huge.Data["padding"] = bytes.Repeat([]byte("x"), DefaultMaxSecretSize)
	generic := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "generic"},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"cert": gw.CertPEM, "key": gw.KeyPEM, "cacert": root.CertPEM},
	}
	onlyCA := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "split-cacert"},
		Data:       map[string][]byte{"cacert": root.CertPEM},
	}
	objs := []runtime.Object{
		tlsSecret("gw", "tls", gw, root.CertPEM), tlsSecret("gw", "denied", gw, nil),
		tlsSecret("other", "tls", gw, root.CertPEM), garbage, mismatched, huge, generic, onlyCA,
		tlsSecret("gw", "split", gw, nil),
	}
	policy := sarPolicy{gwUser: {"gw/tls", "gw/garbage", "gw/mismatched", "gw/huge", "gw/generic", "gw/split-cacert", "gw/split", "other/tls"}}
	f := newFixture(t, policy, objs...)

	type want struct {
		cert, ca []byte
		reason   string // of a refusal
	}
	cases := map[string]struct {
		proxy Proxy
		name  string
		want  want
	}{
		"a kubernetes.io/tls secret of the proxy's namespace is served":   {gwProxy, "kubernetes://tls", want{cert: gw.CertPEM}},
		"a namespaced name of the proxy's own namespace is served":        {gwProxy, "kubernetes://gw/tls", want{cert: gw.CertPEM}},
		"the cacert suffix serves the CA only":                            {gwProxy, "kubernetes://tls-cacert", want{ca: root.CertPEM}},
		"a generic secret with Istio's keys is served":                    {gwProxy, "kubernetes://generic", want{cert: gw.CertPEM}},
		"a generic secret's cacert is served":                             {gwProxy, "kubernetes://generic-cacert", want{ca: root.CertPEM}},
		"a separate -cacert secret is preferred":                          {gwProxy, "kubernetes://split-cacert", want{ca: root.CertPEM}},
		"another namespace's secret is refused even when RBAC allows it":  {gwProxy, "kubernetes://other/tls", want{reason: "cross_namespace"}},
		"another namespace's CA is refused":                               {gwProxy, "kubernetes://other/tls-cacert", want{reason: "cross_namespace"}},
		"a secret the service account may not get is refused":             {gwProxy, "kubernetes://denied", want{reason: "unauthorized"}},
		"another service account of the namespace is refused":             {Proxy{Namespace: "gw", ServiceAccount: "app", Secure: true}, "kubernetes://tls", want{reason: "unauthorized"}},
		"a plaintext stream gets no key material":                         {Proxy{Namespace: "gw", ServiceAccount: "ingress"}, "kubernetes://tls", want{reason: "plaintext"}},
		"a plaintext stream gets no ROOTCA":                               {Proxy{Namespace: "gw", ServiceAccount: "ingress"}, RootCAName, want{reason: "plaintext"}},
		"a garbage certificate is not served":                             {gwProxy, "kubernetes://garbage", want{reason: "invalid"}},
		"a garbage CA is not served":                                      {gwProxy, "kubernetes://garbage-cacert", want{reason: "invalid"}},
		"a key that does not match the certificate is not served":         {gwProxy, "kubernetes://mismatched", want{reason: "invalid"}},
		"a secret over the size bound is not served":                      {gwProxy, "kubernetes://huge", want{reason: "too_large"}},
		"a missing secret gives nothing":                                  {gwProxy, "kubernetes://missing", want{reason: "not_found"}},
		"the workload certificate is not istiod's to serve":               {gwProxy, "default", want{reason: "not_found"}},
		"a malformed name gives nothing":                                  {gwProxy, "kubernetes://gw/a/b", want{reason: "not_found"}},
		"a CA-only request of a secret without a CA gives nothing":        {gwProxy, "kubernetes://mismatched-cacert", want{reason: "invalid"}},
		"an unregistered cluster's proxy gets no Secret of the local one": {remoteGW, "kubernetes://tls", want{reason: "unknown_cluster"}},
		"an unregistered cluster's proxy gets no CA of the local one":     {remoteGW, "kubernetes://gw/tls-cacert", want{reason: "unknown_cluster"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := testutil.ToFloat64(f.srv.refused.WithLabelValues(cmpOr(tc.want.reason, "none")))
			got := f.srv.Generate(context.Background(), tc.proxy, []string{tc.name})
			switch {
			case tc.want.reason != "":
				if len(got) != 0 {
					t.Fatalf("served %v, want a refusal", got)
				}
				if after := testutil.ToFloat64(f.srv.refused.WithLabelValues(tc.want.reason)); after != before+1 {
					t.Fatalf("refusals for %q went from %v to %v", tc.want.reason, before, after)
				}
			case len(got) != 1:
				t.Fatalf("got %d secrets, want 1", len(got))
			case got[0].GetName() != tc.name:
				t.Fatalf("name %q, want %q", got[0].GetName(), tc.name)
			case tc.want.cert != nil:
				if !bytes.Equal(certOf(t, got[0]), tc.want.cert) {
					t.Fatal("wrong certificate chain")
				}
				if got[0].GetTlsCertificate().GetPrivateKey().GetInlineBytes() == nil {
					t.Fatal("no private key")
				}
			default:
				if !bytes.Equal(caOf(t, got[0]), tc.want.ca) {
					t.Fatal("wrong CA")
				}
			}
			if got != nil {
				if err := got[0].ValidateAll(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestSecretUpdatePushed(t *testing.T) {
	root := catest.NewRoot(t)
	gw, next := leaf(t, root), leaf(t, root)
	f := newFixture(t, sarPolicy{gwUser: {"gw/tls"}}, tlsSecret("gw", "tls", gw, nil))
	if got := f.srv.Generate(context.Background(), gwProxy, []string{"kubernetes://tls"}); len(got) != 1 {
		t.Fatalf("got %v before the update", got)
	}
	drain(f.changes)
	if _, err := f.client.CoreV1().Secrets("gw").Update(context.Background(), tlsSecret("gw", "tls", next, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-f.changes
	f.eventually(func() bool {
		got := f.srv.Generate(context.Background(), gwProxy, []string{"kubernetes://tls"})
		return len(got) == 1 && bytes.Equal(certOf(t, got[0]), next.CertPEM)
	})
	drain(f.changes)
	if err := f.client.CoreV1().Secrets("gw").Delete(context.Background(), "tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	<-f.changes
	f.eventually(func() bool {
		return len(f.srv.Generate(context.Background(), gwProxy, []string{"kubernetes://tls"})) == 0
	})
}

func TestAuthorizationCached(t *testing.T) {
	root := catest.NewRoot(t)
	f := newFixture(t, sarPolicy{gwUser: {"gw/tls"}}, tlsSecret("gw", "tls", leaf(t, root), nil))
	clock := catest.NewClock(time.Now())
	f.srv.cfg.Authorizer = NewSARAuthorizer(f.client.AuthorizationV1().SubjectAccessReviews(), 0, 2, clock.Now)
	start := f.reviewCount()
	for range 3 {
		f.srv.Generate(context.Background(), gwProxy, []string{"kubernetes://tls", "kubernetes://tls-cacert"})
	}
	if n := f.reviewCount() - start; n != 1 {
		t.Fatalf("%d reviews for repeated requests, want 1", n)
	}
	clock.Advance(DefaultAuthzTTL)
	f.srv.Generate(context.Background(), gwProxy, []string{"kubernetes://tls"})
	if n := f.reviewCount() - start; n != 2 {
		t.Fatalf("%d reviews after the TTL, want 2", n)
	}
	a := f.srv.cfg.Authorizer.(*SARAuthorizer)
	for _, sa := range []string{"a", "b", "c", "d"} {
		if _, err := a.CanReadSecret(context.Background(), "gw", sa, "tls"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.cache); n > 2 {
		t.Fatalf("cache holds %d entries, bound is 2", n)
	}
}

func TestNewRequiresAuthorizerWithClient(t *testing.T) {
	f := newFixture(t, nil)
	if _, err := New(Config{Bundles: f.bundles, Client: f.client}); err == nil || !strings.Contains(err.Error(), "authorizer") {
		t.Fatalf("New without authorizer: %v", err)
	}
}
