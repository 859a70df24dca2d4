package sds

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bulwark-mesh/bulwark/pkg/ca"
	"github.com/bulwark-mesh/bulwark/pkg/ca/catest"
)

// fakeBundles is a trust bundle owner whose bundle tests set.
type fakeBundles struct {
	mu   sync.Mutex
	cur  *ca.Bundle
	subs []chan *ca.Bundle
}

func newFakeBundles(t *testing.T) *fakeBundles {
	f := &fakeBundles{}
	f.set(catest.NewRoot(t))
	return f
}

func (f *fakeBundles) set(roots ...*catest.Cert) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := &ca.Bundle{}
	if f.cur != nil {
		b.Version = f.cur.Version + 1
	}
	for _, r := range roots {
		b.Roots = append(b.Roots, r.Cert)
		b.PEM = append(b.PEM, r.CertPEM...)
	}
	f.cur = b
	for _, ch := range f.subs {
		select {
		case ch <- b:
		default:
		}
	}
}

func (f *fakeBundles) Current() *ca.Bundle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func (f *fakeBundles) Subscribe() (<-chan *ca.Bundle, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan *ca.Bundle, 1)
	f.subs = append(f.subs, ch)
	return ch, func() {}
}

// sarPolicy allows "get" on the named secrets, by namespace/sa.
type sarPolicy map[string][]string

type fixture struct {
	t       *testing.T
	srv     *Server
	client  *fake.Clientset
	bundles *fakeBundles
	reg     *prometheus.Registry
	reviews *atomic.Int64
	changes <-chan struct{}
}

// newFixture runs a server on a fake clientset holding objs, whose
// SubjectAccessReviews follow policy.
func newFixture(t *testing.T, policy sarPolicy, objs ...runtime.Object) *fixture {
	t.Helper()
	client, reviews := sarClient(policy, objs...)
	bundles := newFakeBundles(t)
	reg := prometheus.NewRegistry()
	srv, err := New(Config{
		Bundles: bundles, Client: client, Registerer: reg, Logger: catest.Logger(t),
		Authorizer: NewSARAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), 0, 0, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	f := &fixture{t: t, srv: srv, client: client, bundles: bundles, reg: reg, reviews: reviews}
	// A consumer in namespace gw, so that its Secrets are watched.
	f.changes = f.watch(gwProxy, RootCAName, "kubernetes://tls")
	return f
}

// sarClient is a fake clientset holding objs, whose SubjectAccessReviews
// follow policy and are counted.
func sarClient(policy sarPolicy, objs ...runtime.Object) (*fake.Clientset, *atomic.Int64) {
	client := fake.NewClientset(objs...)
	reviews := new(atomic.Int64)
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		reviews.Add(1)
		ra := sar.Spec.ResourceAttributes
		allowed := false
		if ra != nil && ra.Verb == "get" && ra.Resource == "secrets" {
			for _, name := range policy[sar.Spec.User] {
				if ra.Namespace+"/"+ra.Name == name {
					allowed = true
				}
			}
		}
		out := sar.DeepCopy()
		out.Status.Allowed = allowed
		return true, out, nil
	})
	return client, reviews
}

// watch registers a consumer of names for p, waits for the Secrets of its
// namespace to be listed, and returns its notifications.
func (f *fixture) watch(p Proxy, names ...string) <-chan struct{} {
	f.t.Helper()
	ch := make(chan struct{}, 1)
	w := f.srv.Watch(p, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	f.t.Cleanup(w.Close)
	w.Set(names)
	f.eventually(func() bool {
		_, _, err := f.srv.lister(context.Background(), nsKey{p.Cluster, p.Namespace})
		return err == nil
	})
	drain(ch)
	return ch
}

func (f *fixture) eventually(cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) reviewCount() int64 { return f.reviews.Load() }

func tlsSecret(ns, name string, c *catest.Cert, ca []byte) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": c.CertPEM, "tls.key": c.KeyPEM},
	}
	if ca != nil {
		s.Data["ca.crt"] = ca
	}
	return s
}

// leaf is a server certificate issued by root.
func leaf(t *testing.T, root *catest.Cert) *catest.Cert {
	return catest.NewIntermediate(t, root, catest.WithoutCA(), catest.WithCommonName("gw.example.com"))
}

func certOf(t *testing.T, s *tlsv3.Secret) []byte {
	t.Helper()
	tc := s.GetTlsCertificate()
	if tc == nil {
		t.Fatalf("secret %s has no certificate: %v", s.GetName(), s)
	}
	return tc.GetCertificateChain().GetInlineBytes()
}

func caOf(t *testing.T, s *tlsv3.Secret) []byte {
	t.Helper()
	vc := s.GetValidationContext()
	if vc == nil {
		t.Fatalf("secret %s has no validation context: %v", s.GetName(), s)
	}
	return vc.GetTrustedCa().GetInlineBytes()
}

func firstCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
